#!/usr/bin/env python3
"""Turns text and JSONL files into Strata's token file and loss mask, with the tokenizer of
a Hugging Face model folder (transformers' AutoTokenizer: tokenizer.json and
tokenizer_config.json, whose chat template renders conversations).

Inputs, one example each:
  *.jsonl   one JSON object a line:
              {"text": ...}                            every token trained
              {"prompt": ..., "completion": ...}       only the completion trained
              {"messages": [{"role", "content"}...]}   through the chat template; only the
                                                       assistant turns trained
  other     a UTF-8 text file is one example, every token trained

Outputs (src/data/token_file.h, src/data/loss_mask.h):
  OUT.u16 (or .u32 when the vocabulary has 65536 tokens or more): the examples' tokens back
          to back, little-endian, each example followed by the EOS token;
  OUT.u16.mask: one byte per token, 1 where the loss counts (the token is a target the
          model learns to predict), 0 where it is context only (a prompt, a user turn). The
          EOS after an example is trained when the example's last token is.
Strata finds the mask next to the token file (strata.data.loss_mask "auto").

Packing and boundaries: Strata draws each training sequence at any offset of the stream, so
a sequence holds the end of one example and the start of the next, separated by EOS. Its
attention is causal over the whole sequence: packed examples attend across their boundaries
(no block-diagonal mask, no position reset). The loss mask keeps the prompts out of the loss.

The examples keep their input order; Strata holds out the end of the file (eval_fraction)
for the eval loss, so put held-out examples last or pass --shuffle.
"""
import argparse
import array
import json
import os
import random
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", help="text files and .jsonl files")
    p.add_argument("--tokenizer", required=True, help="a model folder with the tokenizer files (or a tokenizer folder)")
    p.add_argument("--out", required=True,
                   help="output token file; .u16/.u32 is appended unless given (the mask is OUT.mask)")
    p.add_argument("--seq-len", type=int, default=0,
                   help="the model's seq_len, to report how many sequences the tokens fill and which examples are longer")
    p.add_argument("--shuffle", type=int, metavar="SEED", default=None, help="shuffle the examples with this seed")
    return p.parse_args(argv)


class InputError(Exception):
    pass


def read_examples(path):
    """Yields (where, example) with example a dict: text | prompt+completion | messages."""
    if not path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            yield path, {"text": f.read()}
        return
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{where}: not JSON ({e})") from None
            if not isinstance(obj, dict):
                raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            yield where, obj


def segments(tok, where, obj):
    """An example as its text and the (begin, end) character spans the loss trains on, plus
    whether the tokenizer should add its special tokens (BOS) around the text."""
    keys = set(obj)
    if keys == {"text"} and isinstance(obj["text"], str):
        return obj["text"], [(0, len(obj["text"]))], True
    if keys == {"prompt", "completion"} and all(isinstance(obj[k], str) for k in keys):
        text = obj["prompt"] + obj["completion"]
        return text, [(len(obj["prompt"]), len(text))], True
    if keys == {"messages"} and isinstance(obj["messages"], list):
        return chat_segments(tok, where, obj["messages"])
    raise InputError(f'{where}: expected {{"text"}}, {{"prompt", "completion"}} or {{"messages"}} (strings), '
                     f"got keys {sorted(keys)}")


def render(tok, messages, generation_prompt):
    if not messages and not generation_prompt:
        return ""
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def chat_segments(tok, where, messages):
    """The conversation through the chat template; an assistant turn's span runs from the end
    of the conversation before it (with the generation prompt, so the turn's header is
    context) to the end of the conversation with it (its end-of-turn marker is trained)."""
    if not getattr(tok, "chat_template", None):
        raise InputError(f"{where}: a chat example, but the tokenizer has no chat template")
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise InputError(f'{where}: every message needs a string "role" and "content"')
    text = render(tok, messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = render(tok, messages[:i], True)
        upto = render(tok, messages[: i + 1], False)
        if not (text.startswith(upto) and upto.startswith(before)):
            raise InputError(f"{where}: the chat template does not render this conversation turn by turn "
                             "(an earlier turn changes when later ones are added), so its assistant turns "
                             "cannot be told apart")
        spans.append((len(before), len(upto)))
    return text, spans, False


def encode(tok, text, spans, special):
    """Token ids and their mask: a token is trained when its first character is in a span."""
    enc = tok(text, add_special_tokens=special, return_offsets_mapping=True)
    ids, mask = list(enc["input_ids"]), []
    for begin, end in enc["offset_mapping"]:
        mask.append(1 if any(b <= begin < e for b, e in spans) and end > begin else 0)
    return ids, mask


class Writer:
    """Appends examples to the token file and the mask, counting what it wrote."""

    def __init__(self, path, vocab, eos):
        self.tokens_path, self.mask_path = path, path + ".mask"
        self.code = "I" if path.endswith((".u32", ".uint32")) else "H"
        self.vocab, self.eos = vocab, eos
        self.tokens_file = open(self.tokens_path, "wb")
        self.mask_file = open(self.mask_path, "wb")
        self.examples = self.tokens = self.trained = self.longest = 0
        self.lengths = []

    def add(self, ids, mask):
        if not ids or ids[-1] != self.eos:  # the tokenizer or the template may have ended it already
            ids, mask = ids + [self.eos], mask + [mask[-1] if mask else 0]
        tokens = array.array(self.code, ids)
        if sys.byteorder == "big":
            tokens.byteswap()
        self.tokens_file.write(tokens.tobytes())
        self.mask_file.write(bytes(mask))
        self.examples += 1
        self.tokens += len(ids)
        self.trained += sum(mask)
        self.lengths.append(len(ids))

    def close(self):
        self.tokens_file.close()
        self.mask_file.close()


def output_path(out, vocab):
    if out.endswith((".u16", ".uint16", ".bin")):
        if vocab > 65536:
            raise InputError(f"--out {out}: uint16 cannot hold a vocabulary of {vocab} tokens; use .u32")
        return out
    if out.endswith((".u32", ".uint32")):
        return out
    return out + (".u16" if vocab <= 65536 else ".u32")


def load_tokenizer(folder):
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise InputError(f"needs transformers and tokenizers ({e}); pip install transformers tokenizers") from None
    tok = AutoTokenizer.from_pretrained(folder)
    if not getattr(tok, "is_fast", False):
        raise InputError(f"{folder}: a fast tokenizer (tokenizer.json) is needed for character offsets")
    if tok.eos_token_id is None:
        raise InputError(f"{folder}: the tokenizer has no EOS token to separate the examples")
    return tok


def main(argv):
    args = parse_args(argv)
    tok = load_tokenizer(args.tokenizer)
    vocab = len(tok)
    path = output_path(args.out, vocab)
    examples = [e for p in args.inputs for e in read_examples(p)]
    if not examples:
        raise InputError("no examples in " + ", ".join(args.inputs))
    if args.shuffle is not None:
        random.Random(args.shuffle).shuffle(examples)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    w = Writer(path, vocab, tok.eos_token_id)
    try:
        for where, obj in examples:
            w.add(*encode(tok, *segments(tok, where, obj)))
    finally:
        w.close()
    report(w, vocab, args.seq_len)
    return 0


def report(w, vocab, seq_len):
    print(f"wrote {w.tokens_path} ({'uint32' if w.code == 'I' else 'uint16'}) and {w.mask_path}")
    print(f"  examples {w.examples}, tokens {w.tokens} (vocabulary {vocab}: strata.model.vocab_size >= {vocab})")
    print(f"  trained {w.trained} tokens ({100 * w.trained / w.tokens:.1f}%), masked {w.tokens - w.trained} "
          f"({100 * (w.tokens - w.trained) / w.tokens:.1f}%)")
    if seq_len > 0:
        longer = sum(n > seq_len + 1 for n in w.lengths)
        print(f"  sequences of seq_len + 1 = {seq_len + 1} tokens: {w.tokens // (seq_len + 1)}; "
              f"examples longer than one sequence: {longer}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
