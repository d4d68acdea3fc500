"""Preference pairs (prompt, chosen, rejected) as TRL's DPOTrainer tokenizes them (trl 1.16,
DPOTrainer._prepare_dataset), so that Strata's DPO (src/model/dpo.h, Note [DPO]) trains on the
very tokens TRL would:
  strings: EOS text appended to chosen and rejected unless they end with it; the prompt, the
      prompt + chosen and the prompt + rejected each tokenized alone (with the tokenizer's
      special tokens, as its __call__ adds them);
  messages: the prompt through the chat template with the generation prompt, the prompt +
      chosen and the prompt + rejected conversations through it without;
the completion starts where the tokenized prompt and the tokenized prompt + completion stop
agreeing (the shorter of the two completions' common prefixes), and only its tokens are
trained. A pair is written as two examples, chosen then rejected, exactly these tokens (no EOS
added after them: TRL adds none).
"""
from data_formats import InputError, one_line


def common_prefix_length(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def chat_ids(tok, where, messages, generation_prompt):
    if not getattr(tok, "chat_template", None):
        raise InputError(f"{where}: a conversational preference pair, but the tokenizer has no chat template")
    try:
        out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=generation_prompt)
    except Exception as e:  # a template's own checks
        raise InputError(f"{where}: the chat template refuses this conversation ({one_line(e)})") from None
    return list(out["input_ids"])


def pair_tokens(tok, where, pair):
    """[(chosen ids, mask), (rejected ids, mask)] of a pair made by data_formats.preference."""
    prompt, chosen, rejected = pair["prompt"], pair["chosen"], pair["rejected"]
    if isinstance(chosen, list):
        prompt_ids = chat_ids(tok, where, prompt, True)
        full = [chat_ids(tok, where, prompt + c, False) for c in (chosen, rejected)]
    else:
        eos = tok.eos_token
        prompt_ids = list(tok(text=prompt)["input_ids"])
        full = [list(tok(text=prompt + (c if c.endswith(eos) else c + eos))["input_ids"]) for c in (chosen, rejected)]
    start = min(common_prefix_length(prompt_ids, ids) for ids in full)
    rows = []
    for name, ids in zip(("chosen", "rejected"), full):
        if len(ids) <= start:
            raise InputError(f"{where}: the {name} completion is empty once tokenized after the prompt")
        rows.append((ids, [0] * start + [1] * (len(ids) - start)))
    return rows
