"""A stand-in for transformers' AutoTokenizer, so that tests of scripts/prepare_data.py run
without transformers and tokenizers: a whitespace tokenizer with character offsets, loaded
from a folder that holds a tokenizer.json (any content).

Environment: STUB_TOKENIZER_DELAY (seconds) slows every call, so that a test can stop a run
while it writes; STUB_TOKENIZER_LOG names a file that each load appends the folder to, so
that a test can tell whether the tokenizer was loaded.
"""
import os
import re
import time


class _Tokenizer:
    is_fast = True
    chat_template = None
    bos_token_id, eos_token_id = 1, 2

    def __len__(self):
        return 256

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        time.sleep(float(os.environ.get("STUB_TOKENIZER_DELAY", "0")))
        ids, offsets = ([self.bos_token_id], [(0, 0)]) if add_special_tokens else ([], [])
        for word in re.finditer(r"\S+", text):
            ids.append(3 + sum(word.group().encode("utf-8")) % 253)
            offsets.append(word.span())
        enc = {"input_ids": ids}
        if return_offsets_mapping:
            enc["offset_mapping"] = offsets
        return enc


class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, folder):
        log = os.environ.get("STUB_TOKENIZER_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{folder}\n")
        if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
            # As transformers does for a folder without tokenizer files.
            raise OSError(f"Can't load tokenizer for '{folder}'. Make sure that '{folder}' is the correct path "
                          "to a directory containing all relevant files for a tokenizer.")
        return _Tokenizer()
