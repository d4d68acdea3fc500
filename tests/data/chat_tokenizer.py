#!/usr/bin/env python3
"""A small byte-level BPE tokenizer with a ChatML chat template (as Qwen's), trained here on a
few sentences (no network), saved by transformers as a model folder: what the data format and
preview tests of scripts/prepare_data.py encode with, and what docs/fine-tune.md's preview
shows. Deterministic: the same folder every time.

  python tests/data/chat_tokenizer.py FOLDER
"""
import sys

import tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "What is two plus three? Two plus three is five.",
    "Why is the sky blue? Because sunlight scatters off the air, and blue light scatters most.",
    "Tell me a story. Once upon a time there was a cat who sat on a mat.",
    "Translate to French: good morning. Bonjour.",
    "You are a helpful assistant. You answer briefly.",
    "Hello! How are you? I am fine, thanks. And you?",
    "Summarise: the cat sat on the mat all day. A cat rested.",
]
# ChatML, with Qwen's default system turn left out so that a conversation renders as written.
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def make_chat_tokenizer(folder):
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIALS[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    make_chat_tokenizer(sys.argv[1])
