#!/usr/bin/env python3
"""scripts/prepare_data.py on bad inputs and stopped runs, with a stand-in tokenizer
(stub_transformers/, put first on PYTHONPATH), so it needs neither transformers nor tokenizers
and never skips: each failure is one `error: FILE[:LINE]: ...` line and exit status 1 (a
stop: 128 + the signal), leaves no temporary file, and leaves the earlier outputs byte for
byte (and mode) as they were; inputs are checked before the tokenizer loads.

Run by ctest as `python prepare_data_errors_test.py`.
"""
import array
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "prepare_data.py")
STUB = os.path.join(HERE, "stub_transformers")


def stub_id(word):
    """The stand-in tokenizer's id of a word."""
    return 3 + sum(word.encode("utf-8")) % 253


def snapshot(folder):
    """Every file of the folder: name -> (bytes, permission bits)."""
    files = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            files[name] = (f.read(), stat.S_IMODE(os.stat(path).st_mode))
    return files


class PrepareDataErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tok_dir = os.path.join(self.dir, "model")
        os.mkdir(self.tok_dir)
        with open(os.path.join(self.tok_dir, "tokenizer.json"), "w") as f:
            f.write("{}")
        self.load_log = os.path.join(self.dir, "loads.log")
        self.out_dir = os.path.join(self.dir, "out")
        self.out = os.path.join(self.out_dir, "train")
        # The earlier good outputs that every failing run must leave as they are.
        good = self.write_jsonl("good.jsonl", [{"text": f"the earlier output number {i}"} for i in range(50)])
        r = self.run_script(good)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.before = snapshot(self.out_dir)
        self.assertEqual(sorted(self.before), ["train.u16", "train.u16.examples", "train.u16.mask"])
        os.remove(self.load_log)

    def tearDown(self):
        self.tmp.cleanup()

    def env(self, **extra):
        # PYTHONDONTWRITEBYTECODE: no __pycache__ in the source tree for the stand-in.
        env = dict(os.environ, PYTHONPATH=STUB, PYTHONDONTWRITEBYTECODE="1", STUB_TOKENIZER_LOG=self.load_log)
        env.pop("STUB_TOKENIZER_DELAY", None)
        env.update(extra)
        return env

    def run_script(self, *inputs, tokenizer=None, out=None, umask=None, timeout=60):
        cmd = [sys.executable, SCRIPT, "--tokenizer", tokenizer or self.tok_dir, "--out", out or self.out, *inputs]
        preexec = (lambda: os.umask(umask)) if umask is not None else None
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=timeout,
                              preexec_fn=preexec)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def write_jsonl(self, name, rows):
        lines = [r if isinstance(r, (str, bytes)) else json.dumps(r) for r in rows]
        return self.write(name, b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))

    def assert_untouched(self):
        left = os.listdir(self.out_dir)
        self.assertEqual([n for n in left if n not in self.before], [], "temporary files left behind")
        self.assertEqual(snapshot(self.out_dir), self.before, "the earlier outputs changed")

    def assert_fails(self, r, needle, loaded=False):
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("error: "), r.stderr)
        self.assertIn(needle, r.stderr)
        self.assertEqual(r.stdout, "")
        if not loaded:  # read-only checks come before the (slow) tokenizer load
            self.assertFalse(os.path.exists(self.load_log), "the tokenizer was loaded before the input was checked")
        self.assert_untouched()

    def good_rows(self, n):
        return [{"prompt": f"question {i}", "completion": f" answer {i}"} for i in range(n)]

    # Bad JSONL lines: found while reading, before anything is written.

    def test_a_line_of_another_shape_halfway(self):
        data = self.write_jsonl("bad.jsonl", self.good_rows(20) + [{"prompt": "no completion"}] + self.good_rows(5))
        self.assert_fails(self.run_script(data), f"{data}:21: expected")

    def test_a_line_that_is_not_utf8(self):
        data = self.write_jsonl("latin1.jsonl", self.good_rows(2) + [b'{"text": "caf\xe9"}'])
        self.assert_fails(self.run_script(data), f"{data}:3: not UTF-8 (byte 0xe9 at column 14)")

    def test_a_text_file_that_is_not_utf8(self):
        notes = self.write("notes.txt", b"hello\nw\xffrld\n")
        self.assert_fails(self.run_script(notes), f"{notes}:2: not UTF-8 (byte 0xff at column 2)")

    def test_a_lone_surrogate(self):
        data = self.write_jsonl("surrogate.jsonl", self.good_rows(1) + ['{"text": "a \\ud800 b"}'])
        self.assert_fails(self.run_script(data), f"{data}:2: a string holds a lone surrogate")

    def test_deep_nesting(self):
        data = self.write_jsonl("deep.jsonl", self.good_rows(1) + ["[" * 100000])
        self.assert_fails(self.run_script(data), f"{data}:2: JSON nested deeper than 100 levels")
        data = self.write_jsonl("deep.jsonl", ["[" * 101 + "]" * 101])
        self.assert_fails(self.run_script(data), f"{data}:1: JSON nested deeper than 100 levels")
        data = self.write_jsonl("deep.jsonl", ["[" * 100 + "]" * 100])  # deep enough, but parsed
        self.assert_fails(self.run_script(data), f"{data}:1: expected a JSON object, got list")

    def test_brackets_after_many_escaped_quotes_are_scanned_quickly(self):
        data = self.write_jsonl("quotes.jsonl", ['{"text": "' + '\\"' * 200000 + "[" * 200])  # unterminated
        self.assert_fails(self.run_script(data, timeout=30), f"{data}:1: not JSON")

    def test_an_integer_too_long_to_convert(self):
        data = self.write_jsonl("big.jsonl", ['{"text": 1' + "0" * 5000 + "}"])
        self.assert_fails(self.run_script(data), f"{data}:1: not JSON")

    def test_a_line_too_long(self):
        data = self.write_jsonl("long.jsonl", self.good_rows(1) + ['{"text": "' + "x" * (64 << 20) + '"}'])
        self.assert_fails(self.run_script(data), f"{data}:2: a line longer than 64 MiB")

    def test_preference_pairs_are_written_alone(self):
        data = self.write_jsonl("dpo.jsonl", self.good_rows(2) + [{"prompt": "q", "chosen": "a", "rejected": "b"}])
        self.assert_fails(self.run_script(data), f"{data}:3: a preference pair, but the first record ({data}:1) is "
                                                 "not: preference pairs are written alone (DPO reads every example "
                                                 "as half a pair)")

    def test_bad_alpaca_and_sharegpt_lines_and_mappings(self):
        turns = [{"from": "human", "value": "hi"}, {"from": "function_call", "value": "{}"}]
        for rows, args, needle in [
                ([{"conversations": turns}], (), ":2: turn 2 is a function_call (a tool call), which is not read"),
                ([{"conversations": [{"from": "human"}]}], (), ':2: turn 1 of "conversations" needs a string "from" '
                                                               'and "value"'),
                ([{"instruction": "a", "output": "b", "history": [["q"]]}], (),
                 ':2: "history" entry 1 is not an [instruction, response] pair of strings'),
                ([{"q": "a", "a": 1}], ("--columns", "prompt=q,completion=a"), ":2: expected"),
                ([{"q": "a"}], ("--columns", "prompt"), "--columns prompt: 'prompt' is not FIELD=NAME"),
                ([{"q": "a"}], ("--columns", "prompt=q,completion=q"), "--columns prompt=q,completion=q: one column "
                                                                       "is given for two fields")]:
            with self.subTest(needle):
                data = self.write_jsonl("bad.jsonl", [{"text": "a good line"}] + rows)
                self.assert_fails(self.run_script(*args, data), needle if needle.startswith("--") else data + needle)

    # Inputs that cannot be read.

    def test_a_missing_input(self):
        missing = os.path.join(self.dir, "missing.jsonl")
        self.assert_fails(self.run_script(missing), f"{missing}: no such file")

    def test_a_directory_input(self):
        folder = os.path.join(self.dir, "folder.jsonl")
        os.mkdir(folder)
        self.assert_fails(self.run_script(folder), f"{folder}: a directory, not a regular file")

    def test_a_fifo_input_is_refused_without_blocking(self):
        fifo = os.path.join(self.dir, "fifo.jsonl")
        os.mkfifo(fifo)  # nothing ever writes it: opening it to read would wait forever
        self.assert_fails(self.run_script(fifo, timeout=30), f"{fifo}: a FIFO, not a regular file")

    def test_an_unreadable_input(self):
        if os.geteuid() == 0:  # root reads a file whatever its mode
            return
        data = self.write_jsonl("secret.jsonl", self.good_rows(1))
        os.chmod(data, 0)
        self.assert_fails(self.run_script(data), f"{data}: cannot read (permission denied)")

    # Tokenizer folders that cannot be loaded.

    def test_a_missing_tokenizer_folder(self):
        data = self.write_jsonl("ok.jsonl", self.good_rows(1))
        missing = os.path.join(self.dir, "no-model")
        self.assert_fails(self.run_script(data, tokenizer=missing), f"--tokenizer {missing}: no such folder")
        self.assert_fails(self.run_script(data, tokenizer=data), f"--tokenizer {data}: not a folder")

    def test_a_folder_without_tokenizer_files(self):
        data = self.write_jsonl("ok.jsonl", self.good_rows(1))
        empty = os.path.join(self.dir, "empty-model")
        os.mkdir(empty)
        r = self.run_script(data, tokenizer=empty)
        self.assert_fails(r, f"--tokenizer {empty}: cannot load a tokenizer (Can't load tokenizer", loaded=True)

    def test_an_unreadable_tokenizer_folder(self):
        if os.geteuid() == 0:  # root reads a folder whatever its mode
            return
        data = self.write_jsonl("ok.jsonl", self.good_rows(1))
        os.chmod(self.tok_dir, 0)
        try:
            r = self.run_script(data)
        finally:
            os.chmod(self.tok_dir, 0o755)
        self.assert_fails(r, f"--tokenizer {self.tok_dir}: cannot read (permission denied)")

    # Failures and stops while the outputs are being written.

    def test_a_failure_while_encoding_leaves_the_earlier_outputs(self):
        # The stand-in tokenizer has no chat template: the chat example fails once 30 are written.
        chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
        data = self.write_jsonl("chat.jsonl", self.good_rows(30) + [chat])
        self.assert_fails(self.run_script(data), f"{data}:31: a chat example, but the tokenizer has no chat template",
                          loaded=True)

    def test_an_output_that_is_a_folder(self):
        data = self.write_jsonl("ok.jsonl", self.good_rows(1))
        folder = self.out + ".u32"
        os.mkdir(folder)
        r = self.run_script(data, out=folder)
        os.rmdir(folder)  # fails unless it is still empty
        self.assert_fails(r, f"{folder}: exists and is not a regular file", loaded=True)

    def stop_while_writing(self, signum):
        data = self.write_jsonl("slow.jsonl", self.good_rows(60))
        cmd = [sys.executable, SCRIPT, "--tokenizer", self.tok_dir, "--out", self.out, data]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env(STUB_TOKENIZER_DELAY="0.05"))
        try:
            deadline = time.monotonic() + 30
            while snapshot(self.out_dir) == self.before:  # until it has started writing
                self.assertIsNone(p.poll(), "the run ended before it was stopped")
                self.assertLess(time.monotonic(), deadline, "the run never started writing")
                time.sleep(0.01)
            time.sleep(0.2)  # a few examples into the temporaries
            p.send_signal(signum)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 128 + signum, err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(err.strip(), f"error: stopped by {signal.Signals(signum).name}")
        self.assert_untouched()

    def test_sigterm_while_writing_leaves_the_earlier_outputs(self):
        self.stop_while_writing(signal.SIGTERM)

    def test_sigint_while_writing_leaves_the_earlier_outputs(self):
        self.stop_while_writing(signal.SIGINT)

    def test_every_other_stop_signal_while_writing_leaves_the_earlier_outputs(self):
        for signum in (signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2):
            with self.subTest(signal.Signals(signum).name):
                self.stop_while_writing(signum)

    # Successful runs.

    def test_a_replaced_output_keeps_its_mode(self):
        os.chmod(self.out + ".u16", 0o600)
        os.chmod(self.out + ".u16.mask", 0o640)
        data = self.write_jsonl("new.jsonl", self.good_rows(3))
        r = self.run_script(data, umask=0o022)
        self.assertEqual(r.returncode, 0, r.stderr)
        after = snapshot(self.out_dir)
        self.assertEqual(sorted(after), ["train.u16", "train.u16.examples", "train.u16.mask"])
        self.assertNotEqual(after["train.u16"][0], self.before["train.u16"][0])
        self.assertEqual(after["train.u16"][1], 0o600)
        self.assertEqual(after["train.u16.mask"][1], 0o640)

    def test_new_outputs_get_the_umask_mode_and_the_expected_tokens(self):
        story = self.write("story.txt", b"once upon\r\na time")
        data = self.write_jsonl("pc.jsonl", [{"prompt": "two plus three", "completion": " five"}, "",
                                             '{"text": "smile \\ud83d\\ude00 [[[[["}'])  # a surrogate pair is text
        out = os.path.join(self.dir, "new", "train")
        r = self.run_script(story, data, out=out, umask=0o027)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("examples 3, tokens 17", r.stdout)
        self.assertEqual(sorted(os.listdir(os.path.dirname(out))), ["train.u16", "train.u16.examples", "train.u16.mask"])
        for path in (out + ".u16", out + ".u16.mask", out + ".u16.examples"):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640, path)
        tokens = array.array("H")
        with open(out + ".u16", "rb") as f:
            tokens.frombytes(f.read())
        if sys.byteorder == "big":
            tokens.byteswap()
        with open(out + ".u16", "rb") as f:  # each side file starts with its token file's fingerprint
            header = struct.pack("<QII", len(tokens), zlib.crc32(f.read()), 1)
        with open(out + ".u16.mask", "rb") as f:
            self.assertEqual(f.read(32), b"STRATA-LOSSMASK\n" + header)
            mask = list(f.read())
        ids = lambda text: [stub_id(w) for w in text.split()]  # noqa: E731
        self.assertEqual(list(tokens), [1, *ids("once upon a time"), 2, 1, *ids("two plus three five"), 2,
                                        1, *ids("smile \U0001F600 [[[[["), 2])
        self.assertEqual(mask, [0, 1, 1, 1, 1, 1] + [0, 0, 0, 0, 1, 1] + [0, 1, 1, 1, 1])
        with open(out + ".u16.examples", "rb") as f:
            self.assertEqual(f.read(32), b"STRATA-EXAMPLES\n" + header)
            starts = f.read()
        self.assertEqual([int.from_bytes(starts[i:i + 8], "little") for i in range(0, len(starts), 8)], [0, 6, 12])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
