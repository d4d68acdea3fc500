"""prepare_data.py --preview N: the first N examples decoded, their trained tokens between
⟦ and ⟧, and, given --seq-len, the sequences they make under strata.data.packing, as the
rows of src/data/examples.cc (packed, none) or the consecutive windows of Note [Epochs]
(windows) cut them. It reads raw inputs (encoded as prepare_data.py would write them) or a
token file that prepare_data.py wrote, with its mask and examples side files.
"""
import array
import collections
import itertools
import os
import sys
import zlib

from data_formats import InputError

OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: rare in data, so a trained span stands out
TOKEN_FILES = (".u16", ".uint16", ".bin", ".u32", ".uint32")
SIDE_MAGIC = {"examples": b"STRATA-EXAMPLES\n", "mask": b"STRATA-LOSSMASK\n"}
SIDE_HEADER_BYTES = 32
LLMC_MAGIC = 20240520

# An example's piece (src/data/examples.h): tokens [begin, begin + length) of example `example`
# (0-based), whose tokens number `size`.
Piece = collections.namedtuple("Piece", "example begin length size")


def is_token_file(path):
    return path.endswith(TOKEN_FILES)


def marked(tok, ids, mask):
    """The tokens decoded, each run of trained tokens between ⟦ and ⟧. Runs are decoded whole,
    so that a character split over several tokens reads as itself."""
    out = []
    for trained, run in itertools.groupby(zip(ids, mask), key=lambda t: t[1] != 0):
        text = tok.decode([t for t, _ in run], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        out.append(f"{OPEN}{text}{CLOSE}" if trained else text)
    return "".join(out)


def cut(lengths, seq_len, long_examples):
    """The pieces of the examples (BuildExampleRows' AddPieces): an example longer than a row
    becomes windows of seq_len + 1 tokens overlapping by one ("split") or its first ("truncate");
    an example of one token has no target and is left out."""
    for e, size in enumerate(lengths):
        at = 0
        while size - at >= 2:
            yield Piece(e, at, min(size - at, seq_len + 1), size)
            if size - at <= seq_len + 1 or long_examples == "truncate":
                break
            at += seq_len


def rows(pieces, seq_len, packing):
    """Rows of pieces: one each ("none"), or consecutive ones while their targets fit ("packed")."""
    row, room = [], 0
    for p in pieces:
        if packing == "none" or p.length - 1 > room:
            if row:
                yield row
            row, room = [], seq_len
        row.append(p)
        room -= p.length - 1
    if row:
        yield row


def piece_name(p):
    whole = p.begin == 0 and p.length == p.size
    return f"example {p.example + 1}" + ("" if whole else f"[{p.begin}:{p.begin + p.length}]")


def print_rows(lengths, n, seq_len, packing, long_examples, out):
    print(f"--- sequences of seq_len {seq_len} (packing {packing}, long_examples {long_examples}): each example "
          "attends to itself only, its positions from 0 ---", file=out)
    for i, row in enumerate(rows(cut(lengths, seq_len, long_examples), seq_len, packing), 1):
        if row[0].example >= n:
            break
        targets = sum(p.length - 1 for p in row)
        parts = ", ".join(f"{piece_name(p)} ({p.length - 1} target{'s' * (p.length > 2)})" for p in row)
        print(f"row {i}: {parts}; padding {seq_len - targets}", file=out)


def print_windows(lengths, n, seq_len, out):
    """Consecutive windows of seq_len + 1 tokens, the last token of one the first of the next."""
    print(f"--- sequences of seq_len {seq_len} (packing windows): windows of {seq_len + 1} tokens of the stream, here "
          "the consecutive ones of strata.data.epochs (else at random offsets); attention crosses examples ---",
          file=out)
    extents, total, lengths = [], 0, iter(lengths)  # (example, first token in the stream, size)
    for w in itertools.count():
        begin, end = w * seq_len, w * seq_len + seq_len + 1
        while total < end and (size := next(lengths, None)) is not None:
            extents.append((len(extents), total, size))
            total += size
        first_of_n = sum(s for _, _, s in extents[:n])
        if end > total or begin >= first_of_n:
            break
        parts = [f"example {e + 1}" + ("" if begin <= at and at + size <= end else
                                       f"[{max(begin - at, 0)}:{min(end - at, size)}]")
                 for e, at, size in extents if at < end and at + size > begin]
        print(f"window {w + 1} (tokens {begin}-{end - 1}): {', '.join(parts)}", file=out)


def preview(tok, examples, n, seq_len, packing, long_examples, out=None):
    """examples: an iterable of (label, ids, mask), consumed no further than the layout needs."""
    out = out or sys.stdout
    examples = iter(examples)
    shown = list(itertools.islice(examples, n))
    for i, (label, ids, mask) in enumerate(shown, 1):
        print(f"--- example {i} ({label}): {len(ids)} tokens, {sum(1 for m in mask if m)} trained ---", file=out)
        print(marked(tok, ids, mask), file=out)
    if seq_len <= 0:
        return
    lengths = itertools.chain((len(ids) for _, ids, _ in shown), (len(ids) for _, ids, _ in examples))
    if packing == "windows":
        print_windows(lengths, len(shown), seq_len, out)
    else:
        print_rows(lengths, len(shown), seq_len, packing, long_examples, out)


# A token file prepare_data.py wrote, with its side files (src/data/side_file.h).

def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None


def side_payload(kind, side, token_path, tokens, crc):
    """A side file's bytes after its header, checked against its token file as Strata checks
    them; a file without the header (an older one, or one written by hand) as it is."""
    data = read_bytes(side)
    magic = data[:16]
    if magic not in SIDE_MAGIC.values():
        return data
    if magic != SIDE_MAGIC[kind]:
        held = "an examples file" if magic == SIDE_MAGIC["examples"] else "a loss mask"
        raise InputError(f"{side}: holds {held} (its header says so): the side files were mixed up")
    if len(data) < SIDE_HEADER_BYTES:
        raise InputError(f"{side}: cut short inside its {SIDE_HEADER_BYTES}-byte header")
    recorded = (int.from_bytes(data[16:24], "little"), int.from_bytes(data[24:28], "little"))
    version = int.from_bytes(data[28:32], "little")
    if version != 1:
        raise InputError(f"{side}: format version {version}; this script reads version 1")
    if recorded != (tokens, crc):
        raise InputError(f"{side}: written for a token file of {recorded[0]} tokens (CRC-32 {recorded[1]:08x}), but "
                         f"{token_path} has {tokens} tokens (CRC-32 {crc:08x}): it belongs to another token file")
    return data[SIDE_HEADER_BYTES:]


def example_starts(path, payload, tokens):
    if len(payload) % 8 or not payload:
        raise InputError(f"{path}: {len(payload)} bytes of example starts, not a positive multiple of 8")
    starts = [int.from_bytes(payload[i:i + 8], "little") for i in range(0, len(payload), 8)]
    if starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= tokens:
        raise InputError(f"{path}: the example starts are not increasing from 0 within the {tokens} tokens")
    return starts


def read_prepared(path):
    """(tokens, mask, starts, whether the mask is from a file) of a token file and its side files."""
    data = read_bytes(path)
    code = "I" if path.endswith((".u32", ".uint32")) else "H"
    if code == "H" and path.endswith(".bin") and int.from_bytes(data[:4], "little") == LLMC_MAGIC:
        raise InputError(f"{path}: an llm.c token file, which has no examples to preview")
    tokens = array.array(code)
    if len(data) % tokens.itemsize:
        raise InputError(f"{path}: {len(data)} bytes, not a whole number of {tokens.itemsize}-byte tokens")
    tokens.frombytes(data)
    if sys.byteorder == "big":
        tokens.byteswap()
    crc = zlib.crc32(data)
    if not os.path.exists(path + ".examples"):
        raise InputError(f"{path}.examples: no such file (the preview shows the examples prepare_data.py wrote)")
    starts = example_starts(path + ".examples", side_payload("examples", path + ".examples", path, len(tokens), crc),
                            len(tokens))
    if not os.path.exists(path + ".mask"):
        return tokens, bytes([1]) * len(tokens), starts, False  # as Strata trains without a mask: every token
    mask = side_payload("mask", path + ".mask", path, len(tokens), crc)
    if len(mask) != len(tokens):
        raise InputError(f"{path}.mask: {len(mask)} bytes for {len(tokens)} tokens")
    return tokens, mask, starts, True


def prepared_examples(path, tokens, mask, starts):
    ends = starts[1:] + [len(tokens)]
    for begin, end in zip(starts, ends):
        yield f"{os.path.basename(path)}[{begin}:{end}]", tokens[begin:end].tolist(), mask[begin:end]


def preview_prepared(tok, path, files, n, seq_len, packing, long_examples, out=None):
    """files: read_prepared(path)."""
    tokens, mask, starts, has_mask = files
    if tokens and max(tokens) >= len(tok):
        raise InputError(f"{path}: token {max(tokens)} is outside the tokenizer's vocabulary of {len(tok)}")
    trained = sum(mask)
    print(f"{path}: {len(starts)} examples, {len(tokens)} tokens, {trained} trained"
          + ("" if has_mask else " (no mask file: every token)"), file=out or sys.stdout)
    preview(tok, prepared_examples(path, tokens, mask, starts), n, seq_len, packing, long_examples, out)
