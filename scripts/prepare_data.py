#!/usr/bin/env python3
"""Turns text, JSONL and Parquet files and datasets folders into Strata's token file and loss
mask, with the tokenizer of a Hugging Face model folder (transformers' AutoTokenizer:
tokenizer.json and tokenizer_config.json, whose chat template renders conversations).

Inputs:
  *.jsonl    one record a line, a JSON object
  *.json     a JSON array of records, one example each (alpaca_data.json's shape)
  *.parquet  one record a row (read with pyarrow)
  a folder   that datasets' Dataset.save_to_disk wrote (state.json and Arrow files; of a
             DatasetDict, a split's folder): one record a row
  other      a UTF-8 text file is one example, every token trained
Records, one example each, by their keys (scripts/data_formats.py):
  {"text"}                                  every token trained
  {"prompt", "completion"}                  only the completion trained
  {"messages": [{"role", "content"}...]}    through the chat template; only the assistant
                                            turns trained
  alpaca {"instruction", "input", "output"} ("input", "system", "history" optional) as
      messages, as LLaMA-Factory converts it: a system turn when "system" is not empty; a user
      and an assistant turn for each "history" pair [instruction, response]; a user turn of
      "instruction" and "input" joined by "\\n" (the one not empty alone); an assistant turn of
      "output"
  ShareGPT {"conversations": [{"from", "value"}...]} ("system" optional: a first system turn)
      as messages; roles system, human or user, gpt or assistant, observation or tool (a
      function_call turn is refused)
  {"prompt", "chosen", "rejected"}          a preference pair for DPO (strata.objective "dpo"):
                                            all strings, or all lists of messages; tokenized
                                            as TRL's DPOTrainer does (preference_pairs.py) and
                                            written as two examples, chosen then rejected,
                                            their completions trained; a file of pairs holds
                                            nothing else
so an alpaca or ShareGPT record gives the tokens and mask of its messages. In a table, a null
is an absent field (and a message's null keys are left out).
Other names, as LLaMA-Factory's dataset_info "columns" and "tags" give them:
  --columns FIELD=COLUMN,...   read FIELD (a key above, or role and content: a message's keys)
                               from COLUMN, e.g. messages=conversations,role=from,content=value
                               (then a key named FIELD is not read)
  --roles ROLE=NAME,...        NAME in the data is ROLE (system, user, assistant, tool), e.g.
                               user=human,assistant=gpt
  --ignore-columns COLUMN,...  keys to read past; any other key of no record shape is an error
They apply to every input.

--preview N prints the first N examples (after --shuffle) as they would be written, decoded,
each run of trained tokens between \u27e6 and \u27e7, and writes nothing; with --seq-len L,
also the rows of L targets Strata makes of them (--packing packed or none, --long-examples
split or truncate; src/data/examples.cc), or the consecutive windows (--packing windows).
Given a token file this script wrote (OUT.u16, OUT.u32), it shows that file's examples, read
with its side files, which are checked as Strata checks them.

Outputs (src/data/token_file.h, src/data/loss_mask.h, src/data/examples.h):
  OUT.u16 (or .u32 when the vocabulary has 65536 tokens or more): the examples' tokens back
          to back, little-endian, each example followed by the EOS token;
  OUT.u16.mask: one byte per token, 1 where the loss counts (the token is a target the
          model learns to predict), 0 where it is context only (a prompt, a user turn). The
          EOS after an example is trained when the example's last token is;
  OUT.u16.examples: where each example starts, its first token's index as a little-endian
          uint64 (the first 0), for strata.data.packing "none" and "packed";
  OUT.u16.pairs: with preference pairs, the header alone: the examples are pairs.
Each side file starts with a 32-byte header naming its kind and the token file it belongs to
(its token count and the CRC-32 of its bytes; src/data/side_file.h), so that Strata refuses a
side file left beside a token file it was not written for.
Strata finds the mask and the examples next to the token file (strata.data.loss_mask
"auto"). All three are written under temporary names in OUT's folder and renamed into place
only when complete, so a run that fails or is stopped (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGALRM, SIGUSR1/2) leaves earlier outputs as they were.

Inputs are checked and parsed before the tokenizer loads. Errors (an input that is missing
or not a regular file, bytes that are not UTF-8, a record that is not of the shapes above, a
JSONL line that nests deeper than 100 levels or is longer than 64 MiB) are one line on stderr
naming the file and line (FILE:LINE; a table's FILE:row N, from 1), with exit status 1; a stop
exits with 128 + the signal.

Packing and boundaries (strata.data.packing): "windows", the default for pre-training text,
draws each sequence at any offset of the stream, so it may hold the end of one example and
the start of the next, attending across them. For fine-tuning, "packed" packs whole examples
into each sequence, each attending to itself only with its positions restarting at 0, and
"none" puts one example in each sequence, padded; an example longer than a sequence is split
or truncated (strata.data.long_examples). The loss mask keeps the prompts out of the loss.

The examples keep their input order; Strata holds out the end of the file (eval_fraction)
for the eval loss, so put held-out examples last or pass --shuffle.
"""
import argparse
import array
import contextlib
import json
import os
import random
import re
import secrets
import signal
import stat
import struct
import sys
import zlib

import data_formats
import data_preview
import preference_pairs
from data_formats import InputError, one_line

MAX_LINE_BYTES = 64 << 20  # a JSONL line (one example) longer than this is refused
MAX_DEPTH = 100  # deeper JSON is refused before json.loads, which recurses (RecursionError)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+",
                   help="text, .jsonl, .json and .parquet files and datasets folders (with --preview: or one token file)")
    p.add_argument("--tokenizer", required=True, help="a model folder with the tokenizer files (or a tokenizer folder)")
    p.add_argument("--out", help="output token file; .u16/.u32 is appended unless given (the mask is OUT.mask)")
    p.add_argument("--seq-len", type=int, default=0,
                   help="the model's seq_len, to report how many sequences the tokens fill and which examples are longer")
    p.add_argument("--shuffle", type=int, metavar="SEED", default=None, help="shuffle the examples with this seed")
    p.add_argument("--columns", metavar="FIELD=COLUMN,...", default="",
                   help="read a field from a column (or key) of another name; role and content name message keys")
    p.add_argument("--roles", metavar="ROLE=NAME,...", default="",
                   help="the role (system, user, assistant, tool) that a role name in the data stands for")
    p.add_argument("--ignore-columns", metavar="COLUMN,...", default="", help="columns (keys) to read past")
    p.add_argument("--preview", type=int, metavar="N", default=None,
                   help="print the first N examples with their trained tokens between \u27e6 and \u27e7 (and, with "
                        "--seq-len, their sequences) instead of writing")
    p.add_argument("--packing", choices=("packed", "none", "windows"), default="packed",
                   help="strata.data.packing, for --preview --seq-len (default packed)")
    p.add_argument("--long-examples", choices=("split", "truncate"), default="split",
                   help="strata.data.long_examples, for --preview --seq-len (default split)")
    args = p.parse_args(argv)
    if args.preview is None and not args.out:
        p.error("the following arguments are required: --out (or --preview N)")
    if args.preview is not None and args.out:
        p.error("--preview writes nothing: leave out --out")
    if args.preview is not None and args.preview < 1:
        p.error("--preview N needs N >= 1")
    return args


class Interrupted(BaseException):
    """A stopping signal. A BaseException, so that no `except Exception` swallows it."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class Signals:
    """The stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2) raise
    Interrupted at once, except while temporary outputs
    exist: then they are held until the next check(), so that the stop unwinds through code
    that removes the temporaries rather than through the middle of creating or renaming them."""

    def __init__(self):
        self.deferred, self.pending = False, None

    def install(self):
        # Every signal that would end the process; SIGPIPE and SIGXFSZ Python ignores already,
        # so that a write fails with an OSError (EPIPE, EFBIG), which cleans up the same way.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM, signal.SIGUSR1,
                       signal.SIGUSR2):
            if signal.getsignal(signum) != signal.SIG_IGN:  # a signal ignored by the caller (nohup) stays so
                signal.signal(signum, self.handle)

    def handle(self, signum, frame):
        if not self.deferred:
            raise Interrupted(signum)
        self.pending = signum

    def check(self):
        if self.pending is not None:
            raise Interrupted(self.pending)

    def defer(self, on):
        self.deferred = on
        if not on:
            self.check()


SIGNALS = Signals()


def file_kind(mode):
    """None for a regular file, else what it is: reading a FIFO or a device could block forever."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


def check_input(path):
    """Fails fast, before the tokenizer loads, on an input that cannot be read."""
    try:
        kind = file_kind(os.stat(path).st_mode)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    if kind == "a directory" and data_formats.dataset_folder_kind(path):
        kind = None
    if kind:
        raise InputError(f"{path}: {kind}, not a regular file" +
                         (" (nor a datasets folder: no state.json)" if kind == "a directory" else ""))
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: cannot read (permission denied)")


def open_input(path):
    """The file opened for reading. O_NONBLOCK keeps a FIFO put in its place since check_input
    from blocking the open; fstat then refuses it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind:
            raise InputError(f"{path}: {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def decode_utf8(path, data, first_line=1):
    """data as text; an error names the line and the column (in bytes) of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        column = e.start - data.rfind(b"\n", 0, e.start)
        raise InputError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at column {column})") from None


# A JSON string, or an unterminated one up to the end: always matching where it starts keeps
# the substitution linear (a failed match retried at each later quote would be quadratic).
STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(line):
    """How deep the arrays and objects of a JSON line nest (brackets inside strings are text)."""
    depth = deepest = 0
    for m in BRACKETS.finditer(STRINGS.sub("", line)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def has_lone_surrogate(obj):
    """Whether a string holds half of a surrogate pair (a JSON escape such as \\ud800 alone),
    which is no character: the tokenizer cannot encode it."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def parse_json(where, line):
    opening = line.count("[") + line.count("{")  # fast: too few brackets to nest too deep
    if opening > MAX_DEPTH and json_depth(line) > MAX_DEPTH:
        raise InputError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        obj = json.loads(line)
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, or an integer of more digits than Python converts
        raise InputError(f"{where}: not JSON ({one_line(e)})") from None
    if "\\u" in line and has_lone_surrogate(obj):  # decoded UTF-8 holds none: only an escape makes one
        raise InputError(f"{where}: a string holds a lone surrogate escape (\\ud800-\\udfff), which is not text")
    return obj


def read_jsonl(path, f, mapping):
    examples = []
    n = 0
    while raw := f.readline(MAX_LINE_BYTES + 1):
        n += 1
        where = f"{path}:{n}"
        if len(raw) > MAX_LINE_BYTES:
            raise InputError(f"{where}: a line longer than {MAX_LINE_BYTES >> 20} MiB")
        line = decode_utf8(path, raw, n)
        if not line.strip():
            continue
        examples.append((where, data_formats.to_example(where, parse_json(where, line), mapping)))
    return examples


def read_examples(path, mapping):
    """[(where, example)] with example a dict: text | prompt+completion | messages."""
    if os.path.isdir(path):
        return data_formats.read_dataset_folder(path, mapping)
    if path.endswith(".parquet"):
        return data_formats.read_parquet(path, mapping)
    try:
        with open_input(path) as f:
            if path.endswith(".jsonl"):
                return read_jsonl(path, f, mapping)
            text = decode_utf8(path, f.read())
            if path.endswith(".json"):
                return data_formats.read_json_records(path, parse_json(path, text), mapping)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or one_line(e)})") from None
    return [(path, {"text": text.replace("\r\n", "\n").replace("\r", "\n")})]  # newlines as text mode read them


def segments(tok, where, obj):
    """An example (made by data_formats.to_example) as its text and the (begin, end) character
    spans the loss trains on, plus whether the tokenizer should add its special tokens (BOS)
    around the text."""
    if "text" in obj:
        return obj["text"], [(0, len(obj["text"]))], True
    if "prompt" in obj:
        text = obj["prompt"] + obj["completion"]
        return text, [(len(obj["prompt"]), len(text))], True
    return chat_segments(tok, where, obj["messages"])


def render(tok, where, messages, generation_prompt):
    if not messages and not generation_prompt:
        return ""
    try:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    except Exception as e:  # a template's own checks, e.g. raise_exception("roles must alternate")
        raise InputError(f"{where}: the chat template refuses this conversation ({one_line(e)})") from None


def chat_segments(tok, where, messages):
    """The conversation through the chat template; an assistant turn's span runs from the end
    of the conversation before it (with the generation prompt, so the turn's header is
    context) to the end of the conversation with it (its end-of-turn marker is trained)."""
    if not getattr(tok, "chat_template", None):
        raise InputError(f"{where}: a chat example, but the tokenizer has no chat template")
    text = render(tok, where, messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = render(tok, where, messages[:i], True)
        upto = render(tok, where, messages[: i + 1], False)
        if not (text.startswith(upto) and upto.startswith(before)):
            raise InputError(f"{where}: the chat template does not render this conversation turn by turn "
                             "(an earlier turn changes when later ones are added), so its assistant turns "
                             "cannot be told apart")
        spans.append((len(before), len(upto)))
    return text, spans, False


def with_eos(ids, mask, eos):
    """The example as written: followed by EOS unless the tokenizer or the template ended it."""
    if not ids or ids[-1] != eos:
        return ids + [eos], mask + [mask[-1] if mask else 0]
    return ids, mask


def example_tokens(tok, where, obj):
    """The tokens and mask an example is written as."""
    return with_eos(*encode(tok, *segments(tok, where, obj)), tok.eos_token_id)


def encoded_examples(tok, examples):
    """(where, ids, mask) of each example written: a preference pair is two, chosen then rejected."""
    for where, obj in examples:
        if "preference" in obj:
            for ids, mask in preference_pairs.pair_tokens(tok, where, obj["preference"]):
                yield where, ids, mask
        else:
            yield (where, *example_tokens(tok, where, obj))


def check_one_kind(examples):
    """A file of preference pairs holds nothing else: DPO pairs examples 2k and 2k + 1."""
    pairs = ["preference" in obj for _, obj in examples]
    if any(pairs) and not all(pairs):
        where = next(w for (w, _), p in zip(examples, pairs) if p != pairs[0])
        raise InputError(f"{where}: {'a preference pair' if not pairs[0] else 'not a preference pair'}, but the first "
                         f"record ({examples[0][0]}) is {'one' if pairs[0] else 'not'}: preference pairs are written "
                         "alone (DPO reads every example as half a pair)")
    return bool(pairs) and pairs[0]


def encode(tok, text, spans, special):
    """Token ids and their mask: a token is trained when its first character is in a span."""
    enc = tok(text, add_special_tokens=special, return_offsets_mapping=True)
    ids, mask = list(enc["input_ids"]), []
    for begin, end in enc["offset_mapping"]:
        mask.append(1 if any(b <= begin < e for b, e in spans) and end > begin else 0)
    return ids, mask


class Outputs:
    """Files written under temporary names next to their final ones (so a rename moves them
    there), renamed into place by commit() in the order they were created; discard() removes
    what commit() has not renamed. Callers hold signals (Signals.defer) meanwhile."""

    def __init__(self):
        self.files = []  # (temporary path, final path, open file), not yet renamed

    def create(self, final):
        folder, name = os.path.split(os.path.abspath(final))
        while True:
            temp = os.path.join(folder, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)  # umask applies
                break
            except FileExistsError:
                continue
        f = os.fdopen(fd, "wb")
        self.files.append((temp, final, f))
        with contextlib.suppress(FileNotFoundError):
            os.fchmod(fd, stat.S_IMODE(os.stat(final).st_mode))  # a replaced output keeps its mode
        return f

    def commit(self):
        for _, _, f in self.files:
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before a name points at it
        SIGNALS.check()  # the last point at which a stop leaves the earlier outputs as they were
        folders = {os.path.dirname(final) for _, final, _ in self.files}
        while self.files:
            temp, final, f = self.files[0]
            f.close()
            os.replace(temp, final)
            self.files.pop(0)
        for folder in folders:
            fsync_folder(folder)

    def discard(self):
        for temp, _, f in self.files:
            with contextlib.suppress(OSError):
                f.close()
            with contextlib.suppress(OSError):
                os.unlink(temp)
        self.files = []


def fsync_folder(folder):
    """Makes the renames durable; best effort, as some file systems cannot sync a folder."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


SIDE_MAGIC = {"examples": b"STRATA-EXAMPLES\n", "mask": b"STRATA-LOSSMASK\n", "pairs": b"STRATA-DPOPAIRS\n"}
SIDE_HEADER_BYTES = 32


def side_header(kind, tokens, crc):
    """The header of a side file (src/data/side_file.h): its kind, then the token count and the
    CRC-32 of the token file it belongs to, then the format version."""
    return SIDE_MAGIC[kind] + struct.pack("<QII", tokens, crc, 1)


class Writer:
    """Appends examples to the token file and the mask, counting what it wrote."""

    def __init__(self, outputs, path, vocab, pairs=False):
        self.tokens_path, self.mask_path = path, path + ".mask"
        self.code = "I" if path.endswith((".u32", ".uint32")) else "H"
        self.vocab = vocab
        # The mask first, so that it is renamed into place first: a run killed between the two
        # renames then leaves the old token file with a new mask, which Strata refuses when the
        # lengths differ, rather than a new token file without its mask, trained on in full.
        self.mask_file = outputs.create(self.mask_path)
        self.examples_path = path + ".examples"
        self.examples_file = outputs.create(self.examples_path)
        self.pairs_path = path + ".pairs" if pairs else None
        self.pairs_file = outputs.create(self.pairs_path) if pairs else None
        self.tokens_file = outputs.create(self.tokens_path)
        self.examples = self.tokens = self.trained = self.longest = 0
        self.lengths = []
        self.crc = 0  # of the token file's bytes, for the side files' headers
        for f in (self.mask_file, self.examples_file):
            f.write(bytes(SIDE_HEADER_BYTES))  # filled in by finish()

    def add(self, ids, mask):
        """An example, EOS included (example_tokens)."""
        tokens = array.array(self.code, ids)
        if sys.byteorder == "big":
            tokens.byteswap()
        self.examples_file.write(self.tokens.to_bytes(8, "little"))  # where this example starts
        data = tokens.tobytes()
        self.tokens_file.write(data)
        self.crc = zlib.crc32(data, self.crc)
        self.mask_file.write(bytes(mask))
        self.examples += 1
        self.tokens += len(ids)
        self.trained += sum(mask)
        self.lengths.append(len(ids))

    def finish(self):
        """Writes the side files' headers, now that the token file is complete."""
        for kind, f in (("mask", self.mask_file), ("examples", self.examples_file)):
            f.seek(0)
            f.write(side_header(kind, self.tokens, self.crc))
        if self.pairs_file:
            self.pairs_file.write(side_header("pairs", self.tokens, self.crc))


def output_path(out, vocab):
    if out.endswith((".u16", ".uint16", ".bin")):
        if vocab > 65536:
            raise InputError(f"--out {out}: uint16 cannot hold a vocabulary of {vocab} tokens; use .u32")
        return out
    if out.endswith((".u32", ".uint32")):
        return out
    return out + (".u16" if vocab <= 65536 else ".u32")


def check_output(path):
    """Refuses, before encoding, outputs that a rename could not replace."""
    for p in (path, path + ".mask", path + ".examples", path + ".pairs"):
        if os.path.lexists(p) and not os.path.isfile(p):
            raise InputError(f"{p}: exists and is not a regular file")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise InputError(f"--out {path}: {folder} is not a folder")


def write_outputs(path, examples, tok, vocab, pairs=False):
    """Encodes the examples into the token file and the mask at path, replacing earlier ones
    only once both are complete. A signal during the renames is raised after them."""
    outputs = Outputs()
    SIGNALS.defer(True)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        w = Writer(outputs, path, vocab, pairs)
        for _, ids, mask in encoded_examples(tok, examples):
            SIGNALS.check()
            w.add(ids, mask)
        w.finish()
        outputs.commit()
        return w
    except OSError as e:
        raise InputError(f"{path}: cannot write ({e.strerror or one_line(e)})") from None
    finally:
        outputs.discard()
        SIGNALS.defer(False)


def check_tokenizer_folder(folder):
    if not os.path.exists(folder):
        raise InputError(f"--tokenizer {folder}: no such folder")
    if not os.path.isdir(folder):
        raise InputError(f"--tokenizer {folder}: not a folder")
    if not os.access(folder, os.R_OK | os.X_OK):
        raise InputError(f"--tokenizer {folder}: cannot read (permission denied)")


def load_tokenizer(folder):
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise InputError(f"needs transformers and tokenizers ({e}); pip install transformers tokenizers") from None
    try:
        tok = AutoTokenizer.from_pretrained(folder)
    except Exception as e:  # OSError for missing files, ValueError or tokenizers' own errors for bad ones
        raise InputError(f"--tokenizer {folder}: cannot load a tokenizer ({one_line(e)})") from None
    if not getattr(tok, "is_fast", False):
        raise InputError(f"{folder}: a fast tokenizer (tokenizer.json) is needed for character offsets")
    if tok.eos_token_id is None:
        raise InputError(f"{folder}: the tokenizer has no EOS token to separate the examples")
    return tok


def main(argv):
    args = parse_args(argv)
    SIGNALS.install()
    mapping = data_formats.Mapping(args.columns, args.roles, args.ignore_columns)
    if args.preview is not None and any(map(data_preview.is_token_file, args.inputs)):
        return preview_prepared(args)
    for p in args.inputs:
        check_input(p)
    check_tokenizer_folder(args.tokenizer)
    examples = [e for p in args.inputs for e in read_examples(p, mapping)]
    if not examples:
        raise InputError("no examples in " + ", ".join(args.inputs))
    pairs = check_one_kind(examples)
    tok = load_tokenizer(args.tokenizer)
    if args.shuffle is not None:
        random.Random(args.shuffle).shuffle(examples)
    if args.preview is not None:
        data_preview.preview(tok, encoded_examples(tok, examples), args.preview, args.seq_len, args.packing,
                             args.long_examples)
        return 0
    vocab = len(tok)
    path = output_path(args.out, vocab)
    check_output(path)
    w = write_outputs(path, examples, tok, vocab, pairs)
    report(w, vocab, args.seq_len)
    return 0


def preview_prepared(args):
    """--preview of a token file prepare_data.py wrote, with its side files."""
    if len(args.inputs) != 1:
        raise InputError("--preview reads one token file, or raw inputs: " + ", ".join(args.inputs))
    check_tokenizer_folder(args.tokenizer)
    files = data_preview.read_prepared(args.inputs[0])  # before the (slow) tokenizer load
    tok = load_tokenizer(args.tokenizer)
    data_preview.preview_prepared(tok, args.inputs[0], files, args.preview, args.seq_len, args.packing,
                                  args.long_examples)
    return 0


def report(w, vocab, seq_len):
    print(f"wrote {w.tokens_path} ({'uint32' if w.code == 'I' else 'uint16'}), {w.mask_path} and {w.examples_path}"
          + (f" and {w.pairs_path}: {w.examples // 2} preference pairs (strata.objective \"dpo\")" if w.pairs_path
             else ""))
    print(f"  examples {w.examples}, tokens {w.tokens} (vocabulary {vocab}: strata.model.vocab_size >= {vocab})")
    print(f"  trained {w.trained} tokens ({100 * w.trained / w.tokens:.1f}%), masked {w.tokens - w.trained} "
          f"({100 * (w.tokens - w.trained) / w.tokens:.1f}%)")
    if seq_len > 0:
        longer = sum(n > seq_len + 1 for n in w.lengths)
        print(f"  sequences of seq_len + 1 = {seq_len + 1} tokens: {w.tokens // (seq_len + 1)}; "
              f"examples longer than one sequence: {longer} (strata.data.long_examples splits or truncates them)")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except Interrupted as e:
        print(f"error: stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        sys.exit(128 + e.signum)
