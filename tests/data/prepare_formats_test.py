#!/usr/bin/env python3
"""scripts/prepare_data.py's record shapes and inputs beside `messages`, with a byte-level BPE
tokenizer and a ChatML template built here (chat_tokenizer.py; no network): alpaca, ShareGPT,
renamed columns (--columns, --roles, --ignore-columns), Parquet files and folders written by
datasets' Dataset.save_to_disk each give the bytes (tokens, mask, examples) of the equivalent
`messages` file; a bad row is one error line naming the file and the row; preference records
are checked (their tokens: tests/hf/dpo_trl.py); --preview prints the examples with their trained tokens marked and
their rows, from raw inputs and from the written files alike.

The successful runs call the script's main() in this process (one transformers import); the
failing ones run it as a command, as a user would. Run by ctest as
`python prepare_formats_test.py`; exits 77 (ctest: skipped) with the reason when transformers,
tokenizers, pyarrow or datasets is not installed (scripts/setup_hf.sh), 1 where
STRATA_REQUIRE_PEERS=1.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts")
SCRIPT = os.path.join(SCRIPTS, "prepare_data.py")

try:
    import datasets
    import pyarrow
    import pyarrow.parquet
    from chat_tokenizer import make_chat_tokenizer
except ImportError as e:
    print(f"skipped: transformers, tokenizers, pyarrow and datasets are needed ({e}); run scripts/setup_hf.sh")
    # Where the peers are required (scripts/test.sh, so CI), a skip would hide a check: fail.
    sys.exit(1 if os.environ.get("STRATA_REQUIRE_PEERS") == "1" else 77)

sys.path.insert(0, SCRIPTS)
import prepare_data  # noqa: E402

SYSTEM = "You are a helpful assistant."
# (system or "", [(user, assistant), ...]): the conversations every shape below spells.
CHATS = [("", [("What is two plus three?", "Five.")]),
         (SYSTEM, [("Tell me a story.", "Once upon a time there was a cat."), ("Why is the sky blue?", "Light.")]),
         ("", [("Translate to French:\ngood morning", "Bonjour.")])]


def messages_of(system, turns):
    out = [{"role": "system", "content": system}] if system else []
    for user, assistant in turns:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return out


def alpaca_of(system, turns):
    # The last user turn as instruction + "\n" + input where it has a newline, else no input.
    instruction, _, query = turns[-1][0].partition("\n")
    row = {"instruction": instruction, "input": query, "output": turns[-1][1]}
    if turns[:-1]:
        row["history"] = [list(t) for t in turns[:-1]]
    if system:
        row["system"] = system
    return row


def sharegpt_of(system, turns, role="from", content="value", names=("system", "human", "gpt")):
    conv = [{role: names[0], content: system}] if system else []
    for user, assistant in turns:
        conv += [{role: names[1], content: user}, {role: names[2], content: assistant}]
    return conv


def read_outputs(out):
    files = {}
    for side in ("", ".mask", ".examples"):
        with open(out + ".u16" + side, "rb") as f:
            files[side] = f.read()
    return files


class PrepareFormats(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.tok_dir = os.path.join(cls.dir, "model")
        make_chat_tokenizer(cls.tok_dir)
        prepare_data.SIGNALS.install = lambda: None  # in this process, a Ctrl-C stays the test runner's
        datasets.disable_progress_bars()
        cls.messages = cls.write_jsonl("messages.jsonl", [{"messages": messages_of(*c)} for c in CHATS])
        cls.expected = cls.prepare(cls.messages)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def write_jsonl(cls, name, rows):
        path = os.path.join(cls.dir, name)
        with open(path, "w") as f:
            f.writelines((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
        return path

    @classmethod
    def prepare(cls, *inputs, extra=()):
        """The three output files' bytes, prepared in this process."""
        out = os.path.join(cls.dir, "out", os.path.basename(inputs[0]).split(".")[0])
        with contextlib.redirect_stdout(io.StringIO()):
            prepare_data.main(["--tokenizer", cls.tok_dir, "--out", out, *extra, *inputs])
        return read_outputs(out)

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, "--tokenizer", self.tok_dir, *args], capture_output=True,
                              text=True, timeout=120)

    def assert_error(self, args, message):
        r = self.run_script(*args)
        self.assertEqual((r.returncode, r.stdout), (1, ""), r.stderr)
        self.assertEqual(r.stderr, f"error: {message}\n")

    def test_the_reference_trains_each_assistant_turn(self):
        mask = self.expected[".mask"][32:]
        self.assertEqual(len(mask) * 2, len(self.expected[""]))
        self.assertEqual(len(self.expected[".examples"]), 32 + 8 * len(CHATS))
        self.assertTrue(0 < sum(mask) < len(mask))

    def test_alpaca_and_sharegpt_jsonl_give_the_messages_bytes(self):
        for name, rows, extra in [
                ("alpaca", [alpaca_of(*c) for c in CHATS], ()),
                ("sharegpt", [{"conversations": sharegpt_of(*c)} for c in CHATS], ()),
                # A "system" field instead of a first system turn, and the plain role names.
                ("sharegpt_system", [{"conversations": sharegpt_of("", t, names=("system", "user", "assistant")),
                                      **({"system": s} if s else {})} for s, t in CHATS], ()),
                # The mapping spelled as LLaMA-Factory's dataset_info columns and tags.
                ("mapped_sharegpt", [{"conversations": sharegpt_of(*c)} for c in CHATS],
                 ("--columns", "messages=conversations,role=from,content=value",
                  "--roles", "user=human,assistant=gpt,system=system")),
                ("mapped_dialog", [{"dialog": sharegpt_of(*c, role="speaker", content="says",
                                                          names=("rules", "client", "agent")), "id": i}
                                   for i, c in enumerate(CHATS)],
                 ("--columns", "messages=dialog,role=speaker,content=says", "--roles",
                  "user=client,assistant=agent,system=rules", "--ignore-columns", "id")),
                ("mapped_alpaca", [{"question": r["instruction"], "context": r["input"], "answer": r["output"],
                                    **{k: r[k] for k in ("system", "history") if k in r}, "source": "x"}
                                   for r in (alpaca_of(*c) for c in CHATS)],
                 ("--columns", "instruction=question,input=context,output=answer", "--ignore-columns", "source"))]:
            with self.subTest(name):
                self.assertEqual(self.prepare(self.write_jsonl(name + ".jsonl", rows), extra=extra), self.expected)
        # The same records as one JSON array (alpaca_data.json's shape).
        array = os.path.join(self.dir, "alpaca_data.json")
        with open(array, "w") as f:
            json.dump([alpaca_of(*c) for c in CHATS], f, indent=1)
        self.assertEqual(self.prepare(array), self.expected)

    def test_parquet_and_datasets_folders_give_the_messages_bytes(self):
        # A table: a row without system or history has them null (from_pylist reads the first row's keys).
        alpaca = [{k: r.get(k) for k in ("instruction", "input", "output", "system", "history")}
                  for r in (alpaca_of(*c) for c in CHATS)]
        parquet = os.path.join(self.dir, "alpaca.parquet")
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(alpaca), parquet)
        messages = os.path.join(self.dir, "messages.parquet")
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"messages": messages_of(*c)} for c in CHATS]),
                                    messages)
        folder = os.path.join(self.dir, "sharegpt_ds")
        datasets.Dataset.from_list([{"conversations": sharegpt_of(*c)} for c in CHATS]).save_to_disk(folder)
        mapped = os.path.join(self.dir, "mapped_ds")
        datasets.Dataset.from_list([{"chat": sharegpt_of(*c, names=("system", "user", "bot")), "id": i}
                                    for i, c in enumerate(CHATS)]).save_to_disk(mapped, num_shards=2)
        # A message of a table has every key of its struct: the ones it has no value in are left out.
        named = os.path.join(self.dir, "named.parquet")
        rows = [{"messages": [{"role": "user", "content": "a", "name": "ann"}, {"role": "assistant", "content": "b"}]}]
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), named)
        formats = prepare_data.data_formats
        self.assertEqual([e for _, e in formats.read_parquet(named, formats.Mapping())], rows)
        for name, path, extra in [("alpaca.parquet", parquet, ()), ("messages.parquet", messages, ()),
                                  ("datasets folder", folder, ()),
                                  ("mapped datasets folder in two shards", mapped,
                                   ("--columns", "conversations=chat", "--roles", "assistant=bot",
                                    "--ignore-columns", "id"))]:
            with self.subTest(name):
                self.assertEqual(self.prepare(path, extra=extra), self.expected)

    def test_bad_rows_are_errors_naming_the_file_and_row(self):
        good = {"instruction": "Hi", "input": "", "output": "Hello"}
        typed = os.path.join(self.dir, "typed.parquet")  # row 3 has no output (null in a table)
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(
            [{"instruction": "a", "output": "1"}] * 2 + [{"instruction": "b", "output": None}]), typed)
        roles = os.path.join(self.dir, "roles_ds")
        datasets.Dataset.from_list([{"conversations": sharegpt_of("", [("a", "b")])}] * 3 + [
            {"conversations": [{"from": "human", "value": "a"}, {"from": "bot", "value": "b"}]}]).save_to_disk(roles)
        empty = self.write_jsonl("empty.jsonl", [{"conversations": sharegpt_of("", [("a", "b")])},
                                                 {"conversations": []}])
        wrong = self.write_jsonl("wrong.jsonl", [good, {**good, "input": 3}])
        extra = self.write_jsonl("extra.jsonl", [{**good, "id": 1}])
        dpo = self.write_jsonl("dpo.jsonl", [{"chosen": "Hello", "rejected": "Go away"}])
        dpo_chat = self.write_jsonl("dpo_chat.jsonl", [{"prompt": "q", "chosen": messages_of("", [("a", "b")]),
                                                        "rejected": "c"}])
        dict_folder = os.path.join(self.dir, "dict_ds")
        datasets.DatasetDict(train=datasets.Dataset.from_list([good])).save_to_disk(dict_folder)
        mapped = ("--columns", "conversations=chat")
        one_object = os.path.join(self.dir, "one_object.json")
        with open(one_object, "w") as f:
            json.dump(good, f)
        bad_record = os.path.join(self.dir, "bad_record.json")
        with open(bad_record, "w") as f:
            json.dump([good, {"instruction": "a"}], f)
        cases = [
            ((one_object,), f"{one_object}: a .json input is an array of records (as alpaca_data.json), got a JSON "
                            "dict; write one record a line as .jsonl, or name a text file otherwise"),
            ((bad_record,), f'{bad_record}:record 2: expected {{"text"}}, {{"prompt", "completion"}} or {{"messages"}} '
                            '(strings), alpaca {"instruction", "input", "output"} or ShareGPT {"conversations"}, got '
                            "keys ['instruction']"),
            ((typed,), f'{typed}:row 3: expected {{"text"}}, {{"prompt", "completion"}} or {{"messages"}} (strings), '
                       'alpaca {"instruction", "input", "output"} or ShareGPT {"conversations"}, got keys '
                       "['instruction']"),
            ((roles,), f"{roles}:row 4: turn 2 has role 'bot', none of assistant, gpt, human, observation, system, "
                       "tool, user (--roles maps others)"),
            ((empty,), f'{empty}:2: "conversations" is an empty conversation'),
            ((wrong,), f'{wrong}:2: "input" must be a string, got int'),
            ((*mapped, roles), f'{roles}:row 1: expected {{"text"}}, {{"prompt", "completion"}} or {{"messages"}} '
                               '(strings), alpaca {"instruction", "input", "output"} or ShareGPT {"conversations"}, '
                               "got keys ['conversations'] (no 'chat', named by --columns)"),
            ((extra,), f'{extra}:1: expected {{"text"}}, {{"prompt", "completion"}} or {{"messages"}} (strings), '
                       "alpaca {\"instruction\", \"input\", \"output\"} or ShareGPT {\"conversations\"}, got keys "
                       "['id', 'input', 'instruction', 'output']"),
            ((dpo,), f'{dpo}:1: a preference record needs its "prompt" (the implicit prompt that TRL extracts '
                     "from a shared start is not read)"),
            ((dpo_chat,), f'{dpo_chat}:1: "chosen" and "rejected" must both be strings or both lists of messages '
                          'with a string "role" and "content"'),
            ((dict_folder,), f"{dict_folder}: a DatasetDict folder; name one of its splits (e.g. {dict_folder}/train)"),
            (("--columns", "prompt=q,answer=a", empty), "--columns prompt=q,answer=a: unknown field 'answer' (known: "
                                                        "text, prompt, completion, messages, instruction, input, "
                                                        "output, system, history, conversations, chosen, rejected, "
                                                        "role, content)"),
            (("--roles", "user=human,bot=gpt", empty), "--roles user=human,bot=gpt: unknown role 'bot' (known: "
                                                       "system, user, assistant, tool)"),
        ]
        out = os.path.join(self.dir, "never", "written")
        for args, message in cases:
            with self.subTest(message[:60]):
                self.assert_error(("--out", out, *args), message)
        self.assertFalse(os.path.exists(os.path.dirname(out)))

    def test_preview_marks_the_trained_tokens_and_shows_the_rows(self):
        expected = """\
--- example 1 ({where}1): 27 tokens, 7 trained ---
<|im_start|>user
What is two plus three?<|im_end|>
<|im_start|>assistant
\u27e6Five.<|im_end|>
<|endoftext|>\u27e7
--- example 2 ({where}2): 78 tokens, 21 trained ---
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
Tell me a story.<|im_end|>
<|im_start|>assistant
\u27e6Once upon a time there was a cat.<|im_end|>
\u27e7<|im_start|>user
Why is the sky blue?<|im_end|>
<|im_start|>assistant
\u27e6Light.<|im_end|>
<|endoftext|>\u27e7
--- sequences of seq_len 40 (packing packed, long_examples split): each example attends to itself only, its \
positions from 0 ---
row 1: example 1 (26 targets); padding 14
row 2: example 2[0:41] (40 targets); padding 0
row 3: example 2[40:78] (37 targets); padding 3
"""
        r = self.run_script("--preview", "2", "--seq-len", "40", self.messages)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, expected.format(where=self.messages + ":"))
        # The same examples read back from the files the script wrote.
        out = os.path.join(self.dir, "out", "messages.u16")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            prepare_data.main(["--tokenizer", self.tok_dir, "--preview", "2", "--seq-len", "40", out])
        self.assertEqual(buf.getvalue().replace("messages.u16[0:27]", "1").replace("messages.u16[27:105]", "2"),
                         f"{out}: 3 examples, 139 tokens, 35 trained\n" + expected.format(where=""))

    def test_preview_rows_of_none_truncate_and_windows(self):
        def rows(*extra):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                prepare_data.main(["--tokenizer", self.tok_dir, "--preview", "2", "--seq-len", "40", *extra,
                                   self.messages])
            return buf.getvalue().split(" ---\n")[-1]
        self.assertEqual(rows("--packing", "none", "--long-examples", "truncate"),
                         "row 1: example 1 (26 targets); padding 14\nrow 2: example 2[0:41] (40 targets); padding 0\n")
        # Example 3 (33 targets) is left out of row 2: only 3 targets are free after example 2.
        self.assertEqual(rows("--seq-len", "80"), "row 1: example 1 (26 targets); padding 54\n"
                                                  "row 2: example 2 (77 targets); padding 3\n")
        # Examples 1, 2 and 3 start at tokens 0, 27 and 105 of the stream.
        self.assertEqual(rows("--packing", "windows"), "window 1 (tokens 0-40): example 1, example 2[0:14]\n"
                                                       "window 2 (tokens 40-80): example 2[13:54]\n"
                                                       "window 3 (tokens 80-120): example 2[53:78], example 3[0:16]\n")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
