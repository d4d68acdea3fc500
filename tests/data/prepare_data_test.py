#!/usr/bin/env python3
"""scripts/prepare_data.py with a tiny tokenizer built here (tokenizers' WordLevel, saved by
transformers as a model folder with a chat template; no network): the token file and the
mask it writes for text, prompt/completion and chat examples, its errors, and, given the
strata binary, a few training steps of a tiny model on the result.

Run by ctest as `python prepare_data_test.py [STRATA_BINARY]`; exits 77 (ctest: skipped) with
the reason when transformers or tokenizers is not installed (scripts/setup_hf.sh), 1 where
STRATA_REQUIRE_PEERS=1.
"""
import array
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "prepare_data.py")
BINARY = sys.argv[1] if len(sys.argv) > 1 else ""

try:
    import tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
except ImportError as e:
    print(f"skipped: transformers and tokenizers are needed ({e}); run scripts/setup_hf.sh")
    # Where the peers are required (scripts/test.sh, so CI), a skip would hide a check: fail.
    sys.exit(1 if os.environ.get("STRATA_REQUIRE_PEERS") == "1" else 77)

SPECIALS = ["<unk>", "<bos>", "<eos>", "<|user|>", "<|assistant|>", "<|end|>"]
WORDS = ("what is two plus three five the sky blue why because light scatters tell me a story once upon "
         "time there was cat sat on mat hello hi how are you fine thanks").split()
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool turns') }}{% endif %}"
                 "{{ '<|' + m['role'] + '|> ' + m['content'] + ' <|end|> ' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}")


def make_tokenizer(folder):
    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   additional_special_tokens=SPECIALS[3:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def side_payload(path, magic):
    """A side file's bytes after its header (src/data/side_file.h), checked against its token
    file: the kind, the token count and the CRC-32 of the token file's bytes, version 1."""
    with open(path, "rb") as f:
        data = f.read()
    token_path = path.rsplit(".", 1)[0]
    with open(token_path, "rb") as f:
        token_bytes = f.read()
    tokens, crc, version = struct.unpack("<QII", data[16:32])
    assert data[:16] == magic, data[:16]
    assert (tokens, crc, version) == (len(token_bytes) // 2, zlib.crc32(token_bytes), 1), (tokens, crc, version)
    return data[32:]


def read(path):
    tokens = array.array("H")
    with open(path, "rb") as f:
        tokens.frombytes(f.read())
    if sys.byteorder == "big":
        tokens.byteswap()
    mask = list(side_payload(path + ".mask", b"STRATA-LOSSMASK\n"))
    return list(tokens), mask


def read_starts(path):
    data = side_payload(path + ".examples", b"STRATA-EXAMPLES\n")
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]


def files(folder):
    """name -> bytes of every file in the folder."""
    contents = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            contents[name] = f.read()
    return contents


class PrepareData(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tok_dir = os.path.join(self.dir, "model")
        self.tok = make_tokenizer(self.tok_dir)
        self.id = self.tok.convert_tokens_to_ids

    def tearDown(self):
        self.tmp.cleanup()

    def write_jsonl(self, name, rows):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            for r in rows:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        return path

    def prepare(self, *inputs, extra=()):
        out = os.path.join(self.dir, "out", "train")
        r = run("--tokenizer", self.tok_dir, "--out", out, *extra, *inputs)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out + ".u16", r.stdout

    def test_prompt_completion_trains_the_completion_and_its_eos(self):
        data = self.write_jsonl("pc.jsonl", [{"prompt": "what is two plus three", "completion": " five"},
                                             {"prompt": "why the sky blue", "completion": " because light scatters"}])
        path, out = self.prepare(data)
        tokens, mask = read(path)
        eos, bos = self.id("<eos>"), self.id("<bos>")
        first = [bos] + self.id("what is two plus three five".split()) + [eos]
        second = [bos] + self.id("why the sky blue because light scatters".split()) + [eos]
        self.assertEqual(tokens, first + second)
        self.assertEqual(mask, [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 1, 1, 1, 1])
        self.assertEqual(read_starts(path), [0, len(first)])  # where each example starts
        self.assertIn("examples 2, tokens 17", out)
        self.assertIn("trained 6 tokens (35.3%), masked 11 (64.7%)", out)

    def test_chat_trains_only_the_assistant_turns(self):
        data = self.write_jsonl("chat.jsonl", [{"messages": [
            {"role": "user", "content": "hello how are you"},
            {"role": "assistant", "content": "fine thanks"},
            {"role": "user", "content": "tell me a story"},
            {"role": "assistant", "content": "once upon a time"}]}])
        path, _ = self.prepare(data)
        tokens, mask = read(path)
        trained = [t for t, m in zip(tokens, mask) if m]
        # Each assistant turn's content and its end marker; its <|assistant|> header is context.
        self.assertEqual(trained, self.id("fine thanks <|end|> once upon a time <|end|> <eos>".split()))
        self.assertEqual(tokens[-1], self.id("<eos>"))
        self.assertEqual(tokens.count(self.id("<|user|>")), 2)

    def test_text_files_and_text_lines_are_all_trained_and_seq_len_is_reported(self):
        story = os.path.join(self.dir, "story.txt")
        with open(story, "w") as f:
            f.write("once upon a time there was a cat")
        data = self.write_jsonl("t.jsonl", [{"text": "the cat sat on the mat"}, ""])
        path, out = self.prepare(story, data, extra=("--seq-len", "8"))
        tokens, mask = read(path)
        self.assertEqual(len(tokens), 10 + 8)
        self.assertEqual(mask, [0] + [1] * 9 + [0] + [1] * 7)  # a BOS has no characters: never trained
        self.assertIn("sequences of seq_len + 1 = 9 tokens: 2; examples longer than one sequence: 1", out)

    def test_bad_input_is_an_error_naming_the_line(self):
        for rows, needle in [(["{not json"], "bad.jsonl:1: not JSON"),
                             ([{"text": "hi"}, {"prompt": "hi"}], "bad.jsonl:2: expected"),
                             ([{"messages": [{"role": "user"}]}], 'bad.jsonl:1: every message needs'),
                             ([{"text": "hi"}, {"messages": []}], 'bad.jsonl:2: "messages" is an empty conversation')]:
            data = self.write_jsonl("bad.jsonl", rows)
            r = run("--tokenizer", self.tok_dir, "--out", os.path.join(self.dir, "x"), data)
            self.assertEqual(r.returncode, 1)
            self.assertIn(needle, r.stderr)
            self.assertNotIn("Traceback", r.stderr)
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("prompt", r.stdout)

    def test_a_failed_run_leaves_the_earlier_outputs(self):
        path, _ = self.prepare(self.write_jsonl("good.jsonl", [{"text": "hello how are you"}]))
        folder = os.path.dirname(path)
        before = files(folder)
        # The template refuses the last example, once the others have been written.
        rows = [{"text": "the cat sat on the mat"}] * 20 + [{"messages": [{"role": "tool", "content": "hi"}]}]
        data = self.write_jsonl("tool.jsonl", rows)
        r = run("--tokenizer", self.tok_dir, "--out", path, data)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{data}:21: the chat template refuses this conversation (no tool turns)", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(files(folder), before)  # and no temporary file beside them

    def test_a_broken_tokenizer_is_an_error(self):
        with open(os.path.join(self.tok_dir, "tokenizer.json"), "w") as f:
            f.write("{not json")
        r = run("--tokenizer", self.tok_dir, "--out", os.path.join(self.dir, "x"),
                self.write_jsonl("t.jsonl", [{"text": "hi"}]))
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"error: --tokenizer {self.tok_dir}: cannot load a tokenizer", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    @unittest.skipUnless(BINARY, "no strata binary given")
    def test_a_tiny_model_fine_tunes_on_the_output(self):
        rows = [{"prompt": "what is two plus three", "completion": " five"},
                {"messages": [{"role": "user", "content": "hello how are you"},
                              {"role": "assistant", "content": "fine thanks"}]},
                {"prompt": "why the sky blue", "completion": " because light scatters"}] * 40
        path, _ = self.prepare(self.write_jsonl("ft.jsonl", rows), extra=("--shuffle", "1"))
        metrics = os.path.join(self.dir, "metrics.jsonl")
        sets = ["strata.model.vocab_size=64", "strata.model.seq_len=16", "strata.model.n_layer=1",
                "strata.model.d_model=32", "strata.model.n_head=2", f"strata.data.path={path}",
                "strata.data.eval_fraction=0.2", "strata.eval_interval=0",
                "train_micro_batch_size_per_gpu=4", "zero_optimization.offload_param.device=none",
                "zero_optimization.offload_optimizer.device=none", "bf16.enabled=false"]
        for packing in ("windows", "packed"):  # random windows, then whole examples packed (Note [Examples])
            cmd = [BINARY, "train", "--steps", "3", "--metrics", metrics] + [a for s in sets for a in ("--set", s)]
            cmd += ["--set", f"strata.data.packing={packing}"]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("loss mask", r.stdout + r.stderr)  # the start-up line names the mask it found
            if packing == "packed":
                self.assertRegex(r.stdout + r.stderr, r"\d+ packed examples in \d+ rows")
            with open(metrics) as f:
                losses = [json.loads(line)["loss"] for line in f if line.strip()]
            self.assertEqual(len(losses), 3)
            self.assertTrue(all(math.isfinite(x) for x in losses), losses)
            os.remove(metrics)

    @unittest.skipUnless(BINARY, "no strata binary given")
    def test_a_side_file_of_another_token_file_is_refused_naming_both(self):
        # A stale side file used to train with exit 0 when its sizes happened to fit (with
        # strata.data.eval_path set, 40 examples in 99 rows, windows across real boundaries).
        chat = [{"messages": [{"role": "user", "content": "hello how are you"},
                              {"role": "assistant", "content": "fine thanks"}]}]
        train, _ = self.prepare(self.write_jsonl("a.jsonl", [{"prompt": "what is two plus three",
                                                               "completion": " five"}] * 40))
        evals = os.path.join(self.dir, "out", "eval")
        self.assertEqual(run("--tokenizer", self.tok_dir, "--out", evals, self.write_jsonl("e.jsonl", chat * 8))
                         .returncode, 0)
        other = os.path.join(self.dir, "out", "other")
        self.assertEqual(run("--tokenizer", self.tok_dir, "--out", other,
                             self.write_jsonl("b.jsonl", [{"text": "the cat sat on the mat"}] * 50)).returncode, 0)
        sets = ["strata.model.vocab_size=64", "strata.model.seq_len=16", "strata.model.n_layer=1",
                "strata.model.d_model=32", "strata.model.n_head=2", f"strata.data.path={train}",
                f"strata.data.eval_path={evals}.u16", "strata.data.packing=packed", "strata.eval_batches=1",
                "zero_optimization.offload_param.device=none", "zero_optimization.offload_optimizer.device=none",
                "bf16.enabled=false"]
        cmd = [BINARY, "train", "--steps", "1"] + [a for s in sets for a in ("--set", s)]
        ok = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        for side in (".examples", ".mask"):
            with self.subTest(side):
                saved = train + side + ".saved"
                shutil.copy(train + side, saved)
                shutil.copy(other + ".u16" + side, train + side)
                r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
                shutil.move(saved, train + side)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn(f"'{train}{side}' was written for a token file of ", r.stderr)
                self.assertIn(f"but '{train}' has ", r.stderr)
                self.assertIn("the side file belongs to another token file", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
