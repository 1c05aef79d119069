"""The generated parts of the docs: the CLI reference from ``spectune``'s own argparse parser
and the REST reference from the app's OpenAPI document, so neither can drift from the code.

    python docs/_gen/reference.py cli     # Markdown on stdout
    python docs/_gen/reference.py rest

``make docs`` runs them through the MkDocs hook beside this file (``hooks.py``), which puts
each where its page says ``<!-- generated: cli -->`` or ``<!-- generated: rest -->``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # document this checkout's code, not an installed copy


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line help, as ``spectune --help`` lists it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction | argparse._SubParsersAction):
            continue
        name = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest}`"
        what = a.help or ""
        if a.choices:
            what += f" (one of: {', '.join(map(str, a.choices))})"
        if a.option_strings and a.default not in (None, False, argparse.SUPPRESS):
            what += f" (default: `{a.default}`)"
        kind = "required" if a.required or not a.option_strings else "optional"
        rows.append(f"| {name} | {kind} | {_cell(what)} |")
    return rows


def _command(path: list[str], parser: argparse.ArgumentParser, help_: str, out: list[str]):
    subs = _subcommands(parser)
    out += [f"### `{' '.join(path)}`", ""]
    if help_:
        out += [help_[0].upper() + help_[1:] + ".", ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = _arguments(parser)
    if rows:
        out += ["| argument | | what |", "|---|---|---|", *rows, ""]
    helps = _helps(parser)
    for name, sub in subs.items():
        _command([*path, name], sub, helps.get(name, ""), out)


def cli_reference() -> str:
    """Every command and option of ``spectune``, read from ``tuner.cli.build_parser()``."""
    from tuner.cli import EXIT_CODES, build_parser

    top = build_parser()
    out = [
        "## Every command",
        "",
        "Generated from `tuner.cli.build_parser()` when the site is built.",
        "",
        "```text",
        top.format_usage().strip(),
        "```",
        "",
        "| argument | | what |",
        "|---|---|---|",
        *_arguments(top),
        "",
        "```text",
        EXIT_CODES,
        "```",
        "",
    ]
    helps = _helps(top)
    for name, sub in _subcommands(top).items():
        _command(["spectune", name], sub, helps.get(name, ""), out)
    return "\n".join(out).rstrip() + "\n"


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    return schema.get("type", "any")


def _operation(method: str, path: str, op: dict[str, Any], out: list[str]) -> None:
    out += [f"### `{method.upper()} {path}`", ""]
    out += [f"Operation id `{op.get('operationId', '')}`."]
    if op.get("security"):
        out[-1] += " Needs a bearer token when auth is on."
    text = op.get("description") or op.get("summary") or ""
    out += ["", text.strip(), ""] if text.strip() else [""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | what |", "|---|---|---|---|---|"]
        for p in params:
            out.append(
                f"| `{p['name']}` | {p['in']} | {_cell(_schema_name(p.get('schema', {})))} "
                f"| {'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
        out.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, spec in body.items():
        out += [f"Body (`{media}`): {_schema_name(spec.get('schema', {}))}.", ""]
    out += ["| status | meaning | body |", "|---|---|---|"]
    for code, resp in sorted(op.get("responses", {}).items()):
        media = ", ".join(
            f"`{m}` {_schema_name(c.get('schema', {}))}"
            for m, c in resp.get("content", {}).items()
        )
        out.append(f"| {code} | {_cell(resp.get('description', ''))} | {_cell(media)} |")
    out.append("")


def _schema(name: str, schema: dict[str, Any], out: list[str]) -> None:
    out += [f"### {name}", ""]
    if schema.get("description"):
        out += [" ".join(schema["description"].split()), ""]
    props = schema.get("properties", {})
    if not props:
        if "enum" in schema:
            out += ["One of: " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
        return
    required = set(schema.get("required", []))
    out += ["| field | type | required | what |", "|---|---|---|---|"]
    for field, spec in props.items():
        out.append(
            f"| `{field}` | {_cell(_schema_name(spec))} | {'yes' if field in required else 'no'} "
            f"| {_cell(spec.get('description', ''))} |"
        )
    out.append("")


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document, as ``GET /openapi.json`` serves it."""
    from tuner.api import ServiceSettings, create_app

    settings = ServiceSettings(database_url="sqlite://", embedded_worker=False)
    return create_app(settings, run_worker=False).openapi()


def rest_reference(doc: dict[str, Any] | None = None) -> str:
    """Every operation and schema of the REST API, read from ``app.openapi()``."""
    doc = doc or openapi_document()
    out = [
        "## Every operation",
        "",
        f"Generated from the app's OpenAPI document ({doc['info']['title']} "
        f"{doc['info']['version']}, OpenAPI {doc['openapi']}) when the site is built; the "
        "running service serves the same document at `/openapi.json`.",
        "",
        "| method | path | operation id |",
        "|---|---|---|",
    ]
    ops = [
        (path, method, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]
    out += [f"| {m.upper()} | `{p}` | `{o.get('operationId', '')}` |" for p, m, o in ops]
    out.append("")
    for path, method, op in ops:
        _operation(method, path, op, out)
    out += ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        _schema(name, schema, out)
    return "\n".join(out).rstrip() + "\n"


GENERATORS = {"cli": cli_reference, "rest": rest_reference}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=[*GENERATORS, "openapi-json"])
    args = ap.parse_args(argv)
    if args.what == "openapi-json":
        print(json.dumps(openapi_document(), indent=1))
    else:
        sys.stdout.write(GENERATORS[args.what]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
