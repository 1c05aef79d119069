"""Build the built-in chat and summarization workloads from the held-out corpus files.

Why these two beside code completion: speculation behaves differently on them. Chat turns are
templated, multi-turn prompts whose answers are fresh code (little to copy); summarization /
long context prompts are long and the answer copies from them, where n-gram lookup shines.
Both come from the same held-out standard-library files as ``code_completion`` (the tiny
models never trained on them) and are cut to fit ``max_model_len`` 512 with the tokenizer of
``models/tiny/target``.

    .venv/bin/python scripts/make_workloads.py
"""

from __future__ import annotations

import ast
import json
import random
import re
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from train_tiny_pair import corpus_files, read_text, split_files  # noqa: E402

OUT = REPO / "tuner" / "workloads"


def _functions(text: str) -> list[tuple[str, str, str]]:
    """(name, first docstring line, source) of documented top-level or method functions."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            src = ast.get_source_segment(text, node)
            if doc and src and 3 <= src.count("\n") <= 25:
                out.append((node.name, doc.strip().splitlines()[0], src))
    return out


def main() -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(REPO / "models" / "tiny" / "target" / "tokenizer.json"))

    def ntok(s: str) -> int:
        return len(tok.encode(s).ids)

    root = Path(sysconfig.get_paths()["stdlib"])
    _, held = split_files(corpus_files(), root)
    texts = [(p.relative_to(root).as_posix(), read_text(p)) for p in held]
    rng = random.Random(0)

    # Chat: two finished exchanges, then a request the assistant starts answering.
    funcs = [f for _, t in texts for f in _functions(t)]
    rng.shuffle(funcs)
    chat = []
    for i in range(0, len(funcs) - 2, 3):
        turns = funcs[i : i + 3]
        prompt = "### System: You are a Python assistant. Answer with code only.\n"
        for name, doc, src in turns[:2]:
            prompt += f"### User: Write `{name}`: {doc}\n### Assistant:\n{src}\n"
        name, doc, _ = turns[2]
        prompt += f"### User: Write `{name}`: {doc}\n### Assistant:\n"
        if ntok(prompt) <= 400:
            chat.append({"prompt": prompt})
        if len(chat) >= 24:
            break

    # Summarization / long context: a long excerpt, then an instruction whose answer copies.
    summ = []
    for name, text in texts:
        lines = text.splitlines(keepends=True)
        if len(lines) < 80:
            continue
        start = rng.randrange(0, len(lines) - 60)
        excerpt = ""
        for line in lines[start:]:
            if ntok(excerpt + line) > 330:
                break
            excerpt += line
        if ntok(excerpt) < 200:
            continue
        head = "".join(excerpt.splitlines(keepends=True)[:2])
        prompt = (
            f"# File: {name}\n{excerpt}\n"
            "# Summary: the excerpt above, restated line by line.\n" + head
        )
        summ.append({"prompt": prompt})
        if len(summ) >= 24:
            break

    for fname, rows in (("chat.jsonl", chat), ("summarization.jsonl", summ)):
        with (OUT / fname).open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        lens = [ntok(r["prompt"]) for r in rows]
        print(f"{fname}: {len(rows)} prompts, prompt tokens {min(lens)}-{max(lens)}")
    conversations(chat)


_ROLES = {"System": "system", "User": "user", "Assistant": "assistant"}
_FOLLOWUPS = ("Add type hints to it.", "Now write a short unit test for it.")


def conversations(chat: list[dict]) -> None:
    """The chat set as conversations (``conversations.jsonl``, chat format): each raw chat
    prompt's system, user and few-shot assistant turns as messages, less the partial answer it
    ends with (the model writes its own); every other one asks a follow-up question, so the
    set has second turns that carry the model's own first reply."""
    rows = []
    for i, r in enumerate(chat):
        parts = re.split(r"(?:^|\n)### (System|User|Assistant):[ \n]", r["prompt"])
        msgs = [
            {"role": _ROLES[parts[j]], "content": parts[j + 1]} for j in range(1, len(parts), 2)
        ]
        row: dict = {"messages": msgs[:-1]}  # the last is the answer's start
        if i % 2:
            row["followups"] = [_FOLLOWUPS[(i // 2) % len(_FOLLOWUPS)]]
        rows.append(row)
    with (OUT / "conversations.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"conversations.jsonl: {len(rows)} conversations")


if __name__ == "__main__":
    main()
