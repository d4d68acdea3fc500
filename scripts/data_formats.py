"""The record shapes scripts/prepare_data.py reads, and its Parquet and `datasets` folder
readers: each record becomes one of the three examples it encodes (text, prompt + completion,
or a conversation of messages), so that an alpaca or ShareGPT record gives exactly the tokens
and mask of the equivalent `messages` record; or a preference pair for DPO (prompt, chosen,
rejected: strings, or lists of messages). See prepare_data.py's docstring for the shapes.
"""
import json
import os

# The fields a record may hold (JSON keys, or columns of a table), and the keys of a message.
FIELDS = ("text", "prompt", "completion", "messages", "instruction", "input", "output", "system", "history",
          "conversations", "chosen", "rejected")
TAGS = ("role", "content")
ROLES = ("system", "user", "assistant", "tool")
# ShareGPT's role names (LLaMA-Factory's "tags"), and the plain ones some ShareGPT files use.
SHAREGPT_ROLES = {"system": "system", "human": "user", "gpt": "assistant", "observation": "tool",
                  "user": "user", "assistant": "assistant", "tool": "tool"}
ALPACA = {"instruction", "input", "output", "system", "history"}
SHAREGPT = {"conversations", "system"}
PREFERENCE = {"prompt", "chosen", "rejected"}


class InputError(Exception):
    pass


def one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def type_name(v):
    return "null" if v is None else type(v).__name__


def parse_pairs(option, text, known, what):
    """'A=B,C=D' as [(A, B), ...], each A one of `known`; an error names the option and the pair."""
    pairs = []
    for item in text.split(","):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise InputError(f"{option} {text}: '{item}' is not {what.upper()}=NAME")
        if name not in known:
            raise InputError(f"{option} {text}: unknown {what} '{name}' (known: {', '.join(known)})")
        pairs.append((name, value))
    return pairs


class Mapping:
    """--columns, --roles and --ignore-columns: which column (or message key) holds which field,
    which role a role name stands for, and which columns to read past."""

    def __init__(self, columns="", roles="", ignore=""):
        self.column, self.tag = {}, {}  # field -> column; "role"/"content" -> message key
        for field, column in parse_pairs("--columns", columns, FIELDS + TAGS, "field") if columns else ():
            target = self.tag if field in TAGS else self.column
            if field in target:
                raise InputError(f"--columns {columns}: '{field}' is given twice")
            target[field] = column
        self.field_of = {c: f for f, c in self.column.items()}
        if len(self.field_of) < len(self.column):
            raise InputError(f"--columns {columns}: one column is given for two fields")
        self.role_of = {}  # a role name in the data -> the role
        for role, name in parse_pairs("--roles", roles, ROLES, "role") if roles else ():
            if self.role_of.get(name, role) != role:
                raise InputError(f"--roles {roles}: '{name}' is given two roles")
            self.role_of[name] = role
        self.ignore = {c.strip() for c in ignore.split(",") if c.strip()}
        self.plain = not (self.column or self.tag or self.role_of or self.ignore)

    def rename(self, where, obj, columnar):
        """The record with its fields under their own names, ignored columns left out (and, in a
        table, where every row has every column, the columns this row has no value in)."""
        if self.plain and not columnar:
            return obj
        rec = {}
        for key, value in obj.items():
            if key in self.ignore or (columnar and value is None):
                continue
            field = self.field_of.get(key, key)
            if key in self.column and key not in self.field_of:
                field = ("unread", key)  # --columns reads this field from another column
            if field in rec:
                raise InputError(f"{where}: both '{key}' and '{self.column.get(field, field)}' give '{field}'")
            rec[field] = value
        return rec

    def name(self, field):
        """How an error names a field: as the record spells it."""
        column = self.column.get(field, field)
        return f'"{column}"' if column == field else f'"{column}" ({field})'

    def missing(self, rec):
        return [c for f, c in self.column.items() if f not in rec]


def is_messages(value, role_key="role", content_key="content"):
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get(role_key), str) and isinstance(m.get(content_key), str) for m in value)


def to_example(where, obj, mapping, columnar=False):
    """A record as an example prepare_data.py encodes: {"text"}, {"prompt", "completion"} or
    {"messages"}. A record of those shapes without mapping is returned as it is."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    rec = mapping.rename(where, obj, columnar)
    keys = set(rec)
    if keys == {"text"} and isinstance(rec["text"], str):
        return rec
    if keys == {"prompt", "completion"} and all(isinstance(rec[k], str) for k in keys):
        return rec
    if keys == {"messages"} and isinstance(rec["messages"], list):
        return {"messages": chat_messages(where, rec["messages"], mapping, columnar)}
    if {"instruction", "output"} <= keys <= ALPACA:
        return {"messages": alpaca_messages(where, rec, mapping)}
    if "conversations" in keys and keys <= SHAREGPT:
        return {"messages": sharegpt_messages(where, rec, mapping)}
    if {"chosen", "rejected"} <= keys <= PREFERENCE:
        return {"preference": preference(where, rec, mapping, columnar)}
    missing = mapping.missing(rec)
    hint = f" (no {', '.join(repr(c) for c in missing)}, named by --columns)" if missing else ""
    given = sorted(k for k, v in obj.items() if not (columnar and v is None))
    raise InputError(f'{where}: expected {{"text"}}, {{"prompt", "completion"}} or {{"messages"}} (strings), '
                     f'alpaca {{"instruction", "input", "output"}} or ShareGPT {{"conversations"}}, '
                     f"got keys {given}{hint}")


def chat_messages(where, messages, mapping, columnar):
    """A `messages` list, its keys and role names mapped; as it is when nothing is mapped. In a
    table every message has every field of its struct: those without a value are left out, as
    a JSON message would not have them, for the chat template tests `is defined`."""
    role_key, content_key = mapping.tag.get("role", "role"), mapping.tag.get("content", "content")
    if not is_messages(messages, role_key, content_key):
        raise InputError(f'{where}: every message needs a string "{role_key}" and "{content_key}"')
    if not messages:  # (it would be an example of nothing but EOS)
        raise InputError(f"{where}: {mapping.name('messages')} is an empty conversation")
    if not (mapping.tag or mapping.role_of or columnar):
        return messages
    out = []
    for m in messages:
        rest = {k: v for k, v in m.items() if k not in (role_key, content_key) and v is not None}
        out.append({**rest, "role": mapping.role_of.get(m[role_key], m[role_key]), "content": m[content_key]})
    return out


def optional_string(where, rec, field, mapping):
    value = rec.get(field)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where}: {mapping.name(field)} must be a string, got {type_name(value)}")
    return value or ""


def alpaca_messages(where, rec, mapping):
    """LLaMA-Factory's alpaca conversion: a system turn when "system" is not empty, each
    "history" pair [instruction, response] as a user and an assistant turn, then a user turn of
    "instruction" and "input" joined by a newline (either alone when the other is empty) and an
    assistant turn of "output"."""
    for field in ("instruction", "output"):
        if not isinstance(rec[field], str):
            raise InputError(f"{where}: {mapping.name(field)} must be a string, got {type_name(rec[field])}")
    query, system = optional_string(where, rec, "input", mapping), optional_string(where, rec, "system", mapping)
    messages = [{"role": "system", "content": system}] if system else []
    history = rec.get("history") or []
    if not isinstance(history, list):
        raise InputError(f"{where}: {mapping.name('history')} must be a list of [instruction, response] pairs")
    for i, pair in enumerate(history, 1):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise InputError(f"{where}: {mapping.name('history')} entry {i} is not an [instruction, response] "
                             "pair of strings")
        messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    user = "\n".join(s for s in (rec["instruction"], query) if s)
    return messages + [{"role": "user", "content": user}, {"role": "assistant", "content": rec["output"]}]


def sharegpt_role(where, i, name, mapping):
    role = mapping.role_of.get(name) or SHAREGPT_ROLES.get(name)
    if role:
        return role
    if name == "function_call":
        raise InputError(f"{where}: turn {i} is a function_call (a tool call), which is not read; "
                         "only system, human, gpt and observation turns are")
    known = sorted(set(SHAREGPT_ROLES) | set(mapping.role_of))
    raise InputError(f"{where}: turn {i} has role '{name}', none of {', '.join(known)} (--roles maps others)")


def sharegpt_messages(where, rec, mapping):
    """ShareGPT turns {"from", "value"} as messages; a "system" field becomes a first system turn."""
    turns = rec["conversations"]
    field = mapping.name("conversations")
    if not isinstance(turns, list):
        raise InputError(f"{where}: {field} must be a list of turns, got {type_name(turns)}")
    if not turns:
        raise InputError(f"{where}: {field} is an empty conversation")
    role_key, content_key = mapping.tag.get("role", "from"), mapping.tag.get("content", "value")
    system = optional_string(where, rec, "system", mapping)
    messages = [{"role": "system", "content": system}] if system else []
    for i, turn in enumerate(turns, 1):
        if not (isinstance(turn, dict) and isinstance(turn.get(role_key), str)
                and isinstance(turn.get(content_key), str)):
            raise InputError(f'{where}: turn {i} of {field} needs a string "{role_key}" and "{content_key}"')
        messages.append({"role": sharegpt_role(where, i, turn[role_key], mapping), "content": turn[content_key]})
    return messages


def preference(where, rec, mapping, columnar):
    """TRL's preference shapes with an explicit prompt: {"prompt", "chosen", "rejected"} all
    strings, or all lists of messages (their keys and roles mapped as a conversation's)."""
    chosen, rejected, prompt = rec["chosen"], rec["rejected"], rec.get("prompt")
    role_key, content_key = mapping.tag.get("role", "role"), mapping.tag.get("content", "content")
    if prompt is None:
        raise InputError(f"{where}: a preference record needs its {mapping.name('prompt')} (the implicit prompt "
                         "that TRL extracts from a shared start is not read)")
    if isinstance(chosen, str) and isinstance(rejected, str):
        if not isinstance(prompt, str):
            raise InputError(f"{where}: {mapping.name('prompt')} must be a string, as chosen and rejected are")
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    if all(is_messages(v, role_key, content_key) for v in (chosen, rejected)):
        if not is_messages(prompt, role_key, content_key):
            raise InputError(f"{where}: {mapping.name('prompt')} must be a message list, as chosen and rejected are")
        return {k: chat_messages(where, v, mapping, columnar) for k, v in
                (("prompt", prompt), ("chosen", chosen), ("rejected", rejected))}
    raise InputError(f"{where}: {mapping.name('chosen')} and {mapping.name('rejected')} must both be strings "
                     f'or both lists of messages with a string "{role_key}" and "{content_key}"')


# Tables: Parquet files and folders written by datasets' Dataset.save_to_disk.

def import_pyarrow(path):
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
        return pyarrow
    except ImportError as e:
        raise InputError(f"{path}: reading it needs pyarrow ({e}); pip install pyarrow (scripts/setup_hf.sh)") from None


def dataset_folder_kind(path):
    """'dataset' for a folder Dataset.save_to_disk wrote, 'dict' for a DatasetDict's, else None."""
    if os.path.isfile(os.path.join(path, "state.json")):
        return "dataset"
    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        return "dict"
    return None


def read_rows(path, batches, mapping, pa):
    """[(where, example)] from record batches, each row named by its 1-based number."""
    examples = []
    n = 0
    try:
        for batch in batches:
            for row in batch.to_pylist():
                n += 1
                where = f"{path}:row {n}"
                examples.append((where, to_example(where, row, mapping, columnar=True)))
    except (pa.ArrowException, UnicodeDecodeError, OSError) as e:
        raise InputError(f"{path}:row {n + 1}: cannot read ({one_line(e)})") from None
    return examples


def read_parquet(path, mapping):
    pa = import_pyarrow(path)
    try:
        batches = pa.parquet.ParquetFile(path).iter_batches(batch_size=1024)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: not a Parquet file ({one_line(e)})") from None
    return read_rows(path, batches, mapping, pa)


def arrow_files(folder):
    """The Arrow files of a saved Dataset, in order, as its state.json lists them."""
    try:
        with open(os.path.join(folder, "state.json"), encoding="utf-8") as f:
            files = [d["filename"] for d in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{folder}: not a datasets folder (state.json: {one_line(e)})") from None
    for name in files:
        if not isinstance(name, str) or os.path.basename(name) != name:
            raise InputError(f"{folder}: state.json names a data file '{name}' outside the folder")
    return [os.path.join(folder, name) for name in files]


def dataset_batches(folder, pa):
    for path in arrow_files(folder):
        try:
            with pa.memory_map(path) as source:
                yield from pa.ipc.open_stream(source)
        except FileNotFoundError:
            raise InputError(f"{path}: no such file (listed in {folder}/state.json)") from None


def read_dataset_folder(folder, mapping):
    """The rows of a saved Dataset, numbered across its Arrow files."""
    pa = import_pyarrow(folder)
    if dataset_folder_kind(folder) == "dict":
        raise InputError(f"{folder}: a DatasetDict folder; name one of its splits (e.g. {folder}/train)")
    return read_rows(folder, dataset_batches(folder, pa), mapping, pa)


def read_json_records(path, records, mapping):
    """A .json file's array of records (alpaca_data.json's shape), each one example; its
    errors name the record, counted from 1."""
    if not isinstance(records, list):
        raise InputError(f"{path}: a .json input is an array of records (as alpaca_data.json), got a JSON "
                         f"{type(records).__name__}; write one record a line as .jsonl, or name a text file otherwise")
    return [(f"{path}:record {i}", to_example(f"{path}:record {i}", r, mapping)) for i, r in enumerate(records, 1)]
