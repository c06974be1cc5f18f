"""The API reference, generated from the pydantic models: CRD descriptions, the chart's CRDs, docs/reference.md.

The models are the one source of every field's description (attribute docstrings; operator fields that are a gateway
configuration field take its text). This fills the `description` of every property of every CRD in crds/ from them,
editing the hand-written YAML in place (ruamel.yaml round trip: layout and comments stay), copies crds/ to the chart,
and writes docs/reference.md. A CRD property without a model field or a description, a model field missing from its
CRD, or an enum that differs from the field's Literal fails the run, naming the path: nothing ships undocumented.

    .venv/bin/python hack/reference.py           # write (make reference)
    .venv/bin/python hack/reference.py --check   # exit 1 with a diff when a file is stale (make lint)
"""

from __future__ import annotations

import argparse
import copy
import difflib
import io
import json
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import FoldedScalarString

from mcpg_gateway.contract import config
from mcpg_operator import gateway_settings, models

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Kind:
    """A CRD file under crds/ and the models its spec and status mirror."""

    crd: str
    spec: type[BaseModel]
    status: type[BaseModel]


# One line per CRD: a CRD in crds/ that is not here fails the run.
KINDS = (
    Kind("resourcewatches.mcpg.dev.yaml", models.ResourceWatchSpec, models.ResourceWatchStatus),
    Kind("webhooktokens.mcpg.dev.yaml", models.WebhookTokenSpec, models.WebhookTokenStatus),
    Kind("mcpgateways.mcpg.dev.yaml", gateway_settings.McpGatewaySpec, gateway_settings.McpGatewayStatus),
)

# Every object has these; their text is Kubernetes' own (what controller-gen writes).
STANDARD = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object.",
    "kind": "Kind is a string value representing the REST resource this object represents.",
}
# The API server refuses a CRD whose root `metadata` schema says anything but `type: object` (its schema is
# Kubernetes' own ObjectMeta), a description included: it is left as written.
IMPLICIT = frozenset({"metadata"})
# A description goes before the keys that hold structure or rules, after the field's own constraints.
STRUCTURE_KEYS = ("required", "properties", "items", "additionalProperties", "x-kubernetes-validations")
WIDTH = 118
GATEWAY_EXAMPLE = Path("examples/gateway/quickstart.yaml")


class Undocumented(Exception):
    """CRD properties and model fields that do not match, or lack a description; each names its path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the CRDs and the models disagree:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems


def _yaml() -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096  # never re-wrap a hand-written line; descriptions are folded here, at WIDTH
    y.brace_single_entry_mapping_in_flow_sequence = True  # `[{type: integer}]` stays as written
    return y


# --- the CRDs --------------------------------------------------------------------------------------------------


def _description(text: str, column: int) -> str:
    """`text` as a scalar that fits WIDTH when its key starts at `column`: plain, or folded (`>-`)."""
    text = " ".join(text.split())
    if column + len("description: ") + len(text) <= WIDTH:
        return text
    lines = textwrap.wrap(text, WIDTH - column - 2, break_long_words=False, break_on_hyphens=False)
    folded: str = FoldedScalarString(text)  # a str that ruamel emits as `>-`, folded at fold_pos
    positions, at = [], 0
    for line in lines[:-1]:
        at += len(line)
        positions.append(at)
        at += 1
    folded.fold_pos = positions  # type: ignore[attr-defined]  # ruamel reads it when emitting the scalar
    return folded


def _describe(node: CommentedMap, text: str, column: int) -> None:
    """Set `node`'s description (the key at `column`), in block style, before its structure keys."""
    if node.fa.flow_style():
        node.fa.set_block_style()
    value = _description(text, column)
    if "description" in node:
        node["description"] = value
        return
    keys = list(node)
    at = next((i for i, key in enumerate(keys) if key in STRUCTURE_KEYS), len(keys))
    node.insert(at, "description", value)


def _by_alias(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through `X | None`, `list[X]` and `dict[str, X]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _literal(annotation: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    for arg in typing.get_args(annotation):
        if (values := _literal(arg)) is not None:
            return values
    return None


def _unshared(node: CommentedMap) -> CommentedMap:
    """A property given by a YAML anchor may be an alias's too: each gets its own copy, and its own description."""
    if node.yaml_anchor() is None:
        return node
    mine = copy.deepcopy(node)
    mine.yaml_set_anchor(None)  # no anchor, so no alias is left pointing at it
    return mine


def _stops(node: CommentedMap) -> bool:
    """Free-form below here: preserved unknown fields, or a map of any keys."""
    return bool(node.get("x-kubernetes-preserve-unknown-fields")) or "additionalProperties" in node


def _fill(node: CommentedMap, model: type[BaseModel], path: str, column: int, problems: list[str]) -> None:
    """Describe every property of the object `node` (its keys at `column`) from `model`'s fields."""
    fields = _by_alias(model)
    properties = node.get("properties") or {}
    for name in properties:
        sub = properties[name] = _unshared(properties[name])
        where = f"{path}.{name}"
        field = fields.get(name)
        if field is None:
            problems.append(f"{where}: no field {name!r} in {model.__name__}")
            continue
        if not field.description:
            problems.append(f"{where}: {model.__name__}.{name} has no description (give the field a docstring)")
        else:
            _describe(sub, field.description, column + 4)
        values = _literal(field.annotation)
        if values is not None and "enum" in sub and list(sub["enum"]) != list(values):
            problems.append(f"{where}: enum {list(sub['enum'])} differs from {model.__name__}'s {list(values)}")
        _fill_below(sub, field, where, column + 4, problems)
    problems.extend(
        f"{path}.{alias}: {model.__name__} has this field but the CRD does not"
        for alias in fields
        if alias not in properties
    )


def _fill_below(node: CommentedMap, field: FieldInfo, path: str, column: int, problems: list[str]) -> None:
    if _stops(node):
        return
    items = node.get("items")
    target, target_path, target_column = (items, path + "[]", column + 2) if items is not None else (node, path, column)
    if "properties" not in target:
        return
    inner = _inner_model(field.annotation)
    if inner is None:
        problems.append(f"{target_path}: the CRD has properties, but the model field is not a model")
        return
    _fill(target, inner, target_path, target_column, problems)


def _fill_crd(crd: CommentedMap, kind: Kind, problems: list[str]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    name = crd["spec"]["names"]["kind"]
    if not schema.get("description"):
        problems.append(f"{name}: openAPIV3Schema has no description (say what the object is, in the CRD)")
    for prop, sub in schema["properties"].items():
        where = f"{name}.{prop}"
        # openAPIV3Schema's properties are at column 12 in every CRD here, so their own keys at 14.
        if prop in IMPLICIT:
            sub.pop("description", None)
        elif prop in STANDARD:
            _describe(sub, STANDARD[prop], 14)
        elif prop in ("spec", "status"):
            model = kind.spec if prop == "spec" else kind.status
            if not model.__doc__:
                problems.append(f"{where}: {model.__name__} has no docstring to describe it")
            _describe(sub, model.__doc__ or "", 14)
            _fill(sub, model, where, 14, problems)
        else:
            problems.append(f"{where}: no model for this property")


def crds(root: Path) -> dict[str, str]:
    """Every CRD under `root`/crds, its descriptions filled from the models: file name -> text."""
    y, problems, out = _yaml(), [], {}
    by_file = {kind.crd: kind for kind in KINDS}
    for path in sorted((root / "crds").glob("*.yaml")):
        crd = y.load(path.read_text())
        kind = by_file.get(path.name)
        if kind is None:
            problems.append(f"crds/{path.name}: no models for it in hack/reference.py KINDS (add one line)")
            continue
        _fill_crd(crd, kind, problems)
        text = io.StringIO()
        y.dump(crd, text)
        out[path.name] = text.getvalue()
    if problems:
        raise Undocumented(problems)
    return out


# --- docs/reference.md: the CRDs --------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: Any) -> str:
    text = value if isinstance(value, str) and value else json.dumps(value)
    return f"`{text}`" if "`" not in text else f"``{text}``"


def _crd_type(node: dict[str, Any]) -> str:
    if "anyOf" in node or node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = str(node.get("type", "object"))
    if kind == "array":
        return f"array of {_crd_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_crd_type(node['additionalProperties'])}"
    if "enum" in node:
        return kind + ": " + ", ".join(_code(v) for v in node["enum"])
    if "format" in node:
        kind += f" ({node['format']})"
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        kind += f" ({low} to {high})"
    elif low is not None or high is not None:
        kind += f" (at least {low})" if low is not None else f" (at most {high})"
    return kind


def _crd_rows(node: dict[str, Any], model: type[BaseModel] | None, path: str) -> Iterator[list[str]]:
    fields = _by_alias(model) if model is not None else {}
    required = set(node.get("required", []))
    for name, sub in (node.get("properties") or {}).items():
        field = fields.get(name)
        example = field.examples[0] if field is not None and field.examples else None
        description = _cell(sub.get("description", "")) + (f" Example: {_code(example)}." if example else "")
        default = _code(sub["default"]) if "default" in sub else ""
        row = [f"`{path}.{name}`", _crd_type(sub), default, "yes" if name in required else "", description]
        yield row
        inner = _inner_model(field.annotation) if field is not None else None
        items = sub.get("items")
        if items is not None and "properties" in items:
            yield from _crd_rows(items, inner, f"{path}.{name}[]")
        elif "properties" in sub and not _stops(sub):
            yield from _crd_rows(sub, inner, f"{path}.{name}")


def _rules(node: dict[str, Any], path: str) -> Iterator[str]:
    for rule in node.get("x-kubernetes-validations", []):
        yield f"- `{path}`: `{' '.join(str(rule['rule']).split())}` — {rule.get('message', '')}"
    for name, sub in (node.get("properties") or {}).items():
        yield from _rules(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _rules(node["items"], f"{path}[]")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _crd_section(text: str, kind: Kind) -> list[str]:
    crd = YAML(typ="safe").load(text)
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    name = crd["spec"]["names"]["kind"]
    out = [f"## {name} (`{crd['spec']['group']}/{version['name']}`)", "", _cell(schema["description"]), ""]
    printed = version.get("additionalPrinterColumns", [])
    columns = ", ".join(c["name"].upper() for c in printed if not c.get("priority"))
    wide = ", ".join(c["name"].upper() for c in printed if c.get("priority"))
    get = f"`kubectl get {crd['spec']['names']['plural']}` shows NAME, {columns}"
    out.append(get + (f"; `-o wide` adds {wide}." if wide else "."))
    header = ["Field", "Type", "Default", "Required", "Description"]
    for part, model in (("spec", kind.spec), ("status", kind.status)):
        out += ["", f"### {part}", "", _cell(schema["properties"][part].get("description", "")), ""]
        out += _table(header, list(_crd_rows(schema["properties"][part], model, part)))
    rules = list(_rules(schema, name))
    if rules:
        out += ["", "### Rules the API server enforces (CEL)", "", *rules]
    return [*out, ""]


# --- docs/reference.md: the gateway configuration ---------------------------------------------------------------


def _anchor(model: type[BaseModel]) -> str:
    return "gateway-" + model.__name__.lower()


def _py_type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _py_type(args[0])
    if origin is typing.Literal:
        return " or ".join(_code(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_py_type(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {_py_type(args[0])}"
    if origin is dict:
        return f"map of {_py_type(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{_anchor(annotation)})"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", SecretStr: "string (secret)"}
    return names.get(annotation, str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return ""
    # call-arg: pydantic types a factory as taking the validated data or nothing; every one here takes nothing.
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return "" if value is None or value is PydanticUndefined else _code(value)


def _models_below(model: type[BaseModel]) -> dict[type[BaseModel], list[str]]:
    """`model` and every model its fields hold, in the order a reader meets them, each with the paths it is at."""
    seen: dict[type[BaseModel], list[str]] = {}

    def visit(m: type[BaseModel], path: str) -> None:
        first = m not in seen
        seen.setdefault(m, []).append(path)
        if not first:
            return
        for name, field in m.model_fields.items():
            inner = _all_models(field.annotation)
            below = f"{path}.{name}".lstrip(".") + ("[]" if typing.get_origin(field.annotation) is list else "")
            for sub in inner:
                kind = sub.model_fields.get("type")
                tag = f" (type: {typing.get_args(kind.annotation)[0]})" if len(inner) > 1 and kind else ""
                visit(sub, below + tag)

    visit(model, "")
    return seen


def _all_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _all_models(arg)]


def _gateway_section(root: Path, problems: list[str]) -> list[str]:
    out = [
        "## The gateway configuration file",
        "",
        "What a standalone gateway loads (`mcpg-gateway --config FILE`) and what the operator renders into its Secret: "
        "snake_case keys, `${env.NAME}` allowed in `backend`, `watch` and `gateway.bus` values. Every field below "
        "is optional unless marked required.",
        "",
    ]
    for model, paths in _models_below(config.GatewayConfig).items():
        out += [f'<a id="{_anchor(model)}"></a>', "", f"### {model.__name__}", ""]
        out += ["At " + ", ".join(f"`{p}`" for p in paths) + "." if paths != [""] else "The file's top level.", ""]
        if model.__doc__ and model.__doc__ is not BaseModel.__doc__:
            out += [_cell(model.__doc__), ""]
        if model.model_config.get("extra") == "allow":
            out += ["Other keys are accepted and passed on as they are.", ""]
        rows = []
        for name, field in model.model_fields.items():
            if not field.description:
                problems.append(f"gateway config {model.__name__}.{name}: no description (give the field a docstring)")
            required, description = "yes" if field.is_required() else "", _cell(field.description or "")
            rows.append([f"`{name}`", _py_type(field.annotation), _default(field), required, description])
        out += [*_table(["Field", "Type", "Default", "Required", "Description"], rows), ""]
    example = (root / GATEWAY_EXAMPLE).read_text()
    out += ["### An example", "", f"`{GATEWAY_EXAMPLE}`:", "", "```yaml", example.rstrip(), "```", ""]
    return out


def reference(root: Path, crd_texts: dict[str, str]) -> str:
    problems: list[str] = []
    lines = [
        "# mcpg API reference",
        "",
        "Generated by `hack/reference.py` from the pydantic models (`operator/mcpg_operator/models.py`, "
        "`gateway/mcpg_gateway/contract/config.py`); do not edit it by hand. `make reference` rewrites it together "
        "with the CRDs' descriptions, and `make lint` fails when it is stale.",
        "",
    ]
    for kind in KINDS:
        lines += _crd_section(crd_texts[kind.crd], kind)
    lines += _gateway_section(root, problems)
    if problems:
        raise Undocumented(problems)
    return "\n".join(lines).rstrip() + "\n"


# --- write or check -----------------------------------------------------------------------------------------


def generate(root: Path) -> dict[Path, str]:
    """Every file this writes under `root`, with its text. Raises Undocumented naming each problem."""
    texts = crds(root)
    out = {root / "crds" / name: text for name, text in texts.items()}
    # The chart ships the same CRDs: Helm installs charts/mcpg/crds, users and the tests install crds/.
    out |= {root / "charts" / "mcpg" / "crds" / name: text for name, text in texts.items()}
    out[root / "docs" / "reference.md"] = reference(root, texts)
    return out


def drift(root: Path) -> list[str]:
    """A unified diff for every file whose text on disk differs from what `generate` makes; empty when none."""
    out = []
    for path, text in generate(root).items():
        have = path.read_text() if path.exists() else ""
        if have != text:
            name = str(path.relative_to(root))
            diff = difflib.unified_diff(
                have.splitlines(True), text.splitlines(True), f"{name} (on disk)", f"{name} (generated)"
            )
            out.append("".join(diff))
    extra = {p.name for p in (root / "charts" / "mcpg" / "crds").glob("*.yaml")} - {
        p.name for p in (root / "crds").glob("*.yaml")
    }
    out += [f"charts/mcpg/crds/{name}: not in crds/ (remove it, or add it there)\n" for name in sorted(extra)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff when a generated file is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = drift(args.root)
            for diff in stale:
                sys.stderr.write(diff)
            if stale:
                sys.stderr.write("hack/reference.py: the files above are stale; run `make reference`\n")
            return 1 if stale else 0
        for path, text in generate(args.root).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    except Undocumented as e:
        sys.stderr.write(f"hack/reference.py: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
