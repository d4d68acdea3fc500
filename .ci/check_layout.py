#!/usr/bin/env python3
"""Checks the rules of the house that the compiler cannot (docs/STYLE.md, "Strata module map"):

  1. Layering: kernels/ includes nothing from offload/ or src/; offload/ nothing from src/;
     include/strata/ headers only the standard library and each other; only files under a
     cuda/ folder include CUDA or NCCL headers; src/ folders include only folders below them
     (base < model, data, comm, device < config < engine, monitor < estimate, checkpoint < settle, hf < cli).
     No file includes <torch/torch.h>: the narrow LibTorch headers are what is precompiled.
  2. Size: no source file under src/, offload/ or kernels/ over 600 lines, no function there
     over 80 lines (bench/ and tests/ excepted).
  3. Owners: in src/, an update mode (strata.optimizer_overlap) is named only by the config
     parser and the update modes (src/engine/update/); a state format's settings and kinds only
     by the config parser and the state format (src/engine/state_format.*); a model family's
     name (hf_model_type compared with a name) only by the family table and the reader and
     writer of config.json (src/model/model_family.*, src/model/hf_config.cc). Everything else
     asks them (UpdateModeFacts, UpdateMode, StateFormat, ModelFamily). The engine's whole
     state (Engine::Impl, engine_impl.h) is named only by the engine's own files
     (src/engine/engine*): its collaborators are built from its parts (engine_parts.h).
  4. Notes: every `Note [Name]` cited in the code, scripts or docs is defined somewhere (a
     comment block headed by it), under its full name, and every defined Note is in
     docs/DESIGN.md's index.

Prints every violation as FILE:LINE: message and exits 1 if there is any. Run by ctest.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
# src/ folders by level: a folder may include its own files and those of lower levels.
SRC_LEVEL = {"base": -1, "model": 0, "data": 0, "comm": 0, "device": 0, "config": 1, "engine": 2, "monitor": 2, "estimate": 3,
             "checkpoint": 3, "settle": 4, "hf": 4, "cli": 5}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
CUDA_HEADER = re.compile(r'^(cuda[_a-z]*\.h|nccl\.h|cublas[_a-z]*\.h|cudnn[_a-z]*\.h)$')


# (pattern, the paths that may use it, what it is)
OWNED = [
    (re.compile(r"\bOptimizerOverlap::k\w+"), ("src/config/", "src/engine/update/"), "an update mode"),
    (re.compile(r"\b(split_master|moments_8bit|adam_states|MasterFormat::k\w+|MomentFormat::k\w+)\b"),
     ("src/config/", "src/engine/state_format."), "a state format"),
    (re.compile(r'\bhf_model_type\s*[!=]='), ("src/model/model_family.", "src/model/hf_config.cc"),
     "a model family (ask its ModelFamily row)"),
    (re.compile(r"\bEngine::Impl\b"), ("src/engine/engine",),
     "the engine's whole state (build the collaborator from the parts it uses, engine_parts.h)"),
]
ENGINE_STATE_HEADER = "src/engine/engine_impl.h"


def sources(top):
    for d, _, files in os.walk(os.path.join(ROOT, top)):
        for f in sorted(files):
            if f.endswith((".h", ".cc", ".cu", ".cuh")):
                yield os.path.join(d, f)


def rel(path):
    return os.path.relpath(path, ROOT)


def check_includes(path, lines, errors):
    r = rel(path)
    parts = r.split(os.sep)
    for n, line in enumerate(lines, 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        quoted, target = m.group(1) == '"', m.group(2)
        where = f"{r}:{n}"
        if not quoted and "/" not in target and CUDA_HEADER.match(target) and "cuda" not in parts[:-1]:
            errors.append(f"{where}: {target} outside a cuda/ folder")
        if not quoted and target == "torch/torch.h":
            errors.append(f"{where}: <torch/torch.h> (include the LibTorch headers the file uses; see docs/STYLE.md)")
        if parts[0] == "include" and quoted and not target.startswith("strata/"):
            errors.append(f"{where}: a public header includes \"{target}\" (only strata/... and the standard library)")
        if parts[0] == "kernels" and quoted and target.split("/")[0] in ("offload", "src"):
            errors.append(f"{where}: kernels/ includes {target}")
        if parts[0] == "offload" and quoted and target.startswith("src/"):
            errors.append(f"{where}: offload/ includes {target}")
        if quoted and target == ENGINE_STATE_HEADER and not r.startswith("src/engine/engine"):
            errors.append(f"{where}: includes the engine's whole state (build it from engine_parts.h)")
        if parts[0] == "src" and quoted and target.startswith("src/"):
            mine, theirs = parts[1], target.split("/")[1]
            if mine != theirs and SRC_LEVEL.get(theirs, 99) >= SRC_LEVEL.get(mine, 99):
                errors.append(f"{where}: src/{mine} includes {target} (src/{theirs} is not below it)")


def strip_code(text):
    """Comments and string/char literals blanked out, line structure kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            k = text.find("(", i)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_functions(path, text, errors):
    """Brace blocks opened at namespace or class scope by something that ends with ')' (plus
    qualifiers, or a constructor's initializer list) are functions; count their lines."""
    code = strip_code(text)
    stack = []  # kind of each open brace: "scope" (namespace/class/extern/enum/init) or "function"
    func_start = None
    last_stop = 0  # index after the last ';', '{' or '}' at scope level
    line_of = lambda idx: code.count("\n", 0, idx) + 1
    for i, c in enumerate(code):
        if c == "{":
            if stack and stack[-1] == "function" or any(k == "function" for k in stack):
                stack.append("inner")
                continue
            head = code[last_stop:i].strip()
            is_function = bool(re.search(r"\)\s*(const|noexcept|override|final|mutable|->\s*[\w:<>&*, ]+|\s)*$", head)) \
                or bool(re.search(r"\)\s*:\s*[\w:]+\s*[({]", head))
            if re.match(r"^(namespace|class|struct|union|enum|extern)\b", head) or re.search(r"=\s*$", head):
                is_function = False
            if re.search(r"\b(class|struct|union|enum)\b[^()]*$", head):
                is_function = False
            if is_function:
                stack.append("function")
                func_start = (line_of(last_stop + len(code[last_stop:i]) - len(code[last_stop:i].lstrip())), head)
            else:
                stack.append("scope")
            last_stop = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "scope"
            if kind == "function":
                start, head = func_start
                length = line_of(i) - start + 1
                if length > MAX_FUNCTION_LINES:
                    name = re.sub(r"\s+", " ", head.split("(")[0])[-60:]
                    errors.append(f"{rel(path)}:{start}: function {name.strip()} is {length} lines "
                                  f"(at most {MAX_FUNCTION_LINES})")
            if not any(k == "function" for k in stack):
                last_stop = i + 1
        elif c == ";" and not any(k == "function" for k in stack):
            last_stop = i + 1


def check_owners(path, text, errors):
    r = rel(path)
    code = strip_code(text)
    for pattern, owners, what in OWNED:
        if r.startswith(owners):
            continue
        for m in pattern.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            errors.append(f"{r}:{line}: names {what} ({m.group(0)}); ask its owner ({', '.join(owners)})")


NOTE = re.compile(r"Note \[([^\]]+)\]")
NOTE_HEADING = re.compile(r"^[ \t]*(?://|#)?[ \t]*Note \[([^\]]+)\]", re.M)
NOTE_TREES = ("include", "kernels", "offload", "src", "bench", "tests", "scripts", "configs", "docs", ".ci")
# Where a Note's name is the example, not a citation.
NOTE_EXAMPLES = ("docs/STYLE.md", "docs/DESIGN.md", ".ci/check_layout.py")


def note_name(raw):
    """A citation wrapped over comment lines, as one name."""
    return re.sub(r"\s+", " ", re.sub(r"\n\s*(//|#)\s*", " ", raw)).strip()


def check_notes(errors):
    cited, defined = {}, set()
    paths = [os.path.join(ROOT, "README.md")]
    for top in NOTE_TREES:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            paths += [os.path.join(d, f) for f in sorted(files)
                      if f.endswith((".h", ".cc", ".cu", ".cuh", ".py", ".sh", ".md", ".json", ".txt", ".cmake"))]
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        defined.update(note_name(m.group(1)) for m in NOTE_HEADING.finditer(text))
        if rel(path) in NOTE_EXAMPLES:
            continue
        for m in NOTE.finditer(text):
            cited.setdefault(note_name(m.group(1)), f"{rel(path)}:{text.count(chr(10), 0, m.start()) + 1}")
    for name, where in sorted(cited.items()):
        if name not in defined:
            errors.append(f"{where}: Note [{name}] is cited but defined nowhere (a comment block headed by it)")
    with open(os.path.join(ROOT, "docs", "DESIGN.md"), encoding="utf-8") as f:
        design = f.read()
    for name in sorted(defined):
        if name not in design:
            errors.append(f"docs/DESIGN.md:1: Note [{name}] is defined but not in the Notes index")


def main():
    errors = []
    for top in ("include", "kernels", "offload", "src", "bench", "tests"):
        for path in sources(top):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.split("\n")
            check_includes(path, lines, errors)
            if top in ("kernels", "offload", "src"):
                if len(lines) - 1 > MAX_FILE_LINES:
                    errors.append(f"{rel(path)}:1: {len(lines) - 1} lines (at most {MAX_FILE_LINES})")
                check_functions(path, text, errors)
            if top == "src":
                check_owners(path, text, errors)
    check_notes(errors)
    for e in errors:
        print(e)
    print(f"check_layout: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
