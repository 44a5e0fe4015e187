"""Settings references: what a paper experiment's released code passes or defaults, extracted from a local
checkout and held against what the project's jobs receive (``docs/fidelity/README.md``, the format).

A method's spec (its package's ``fidelity`` module) lists :class:`Setting` entries: a name, the job that
receives it, a locator that reads the value and its line from the released code (:class:`Find`: a regex at
a line of a file; :class:`ShellValue`: a shell script's argument, its variables resolved; :class:`ShellArray`: a
shell array; :class:`YamlKey`: a YAML file's dotted key (Hydra defaults); :class:`FString`: a prompt built by an
f-string, as a ``str.format`` template; :class:`Table`: a fact of a released data file; :class:`Derived`: a
function of other located values), and
the key of the project's resolved settings the value maps to (None: not applicable), with ``expect``, the
code's value in the project's terms. :func:`reference` reads the checkout and the resolved settings into
the reference document (one per experiment, committed as YAML); :func:`refresh` recomputes its project side
from a committed document without the checkout. A setting whose mapped value differs from the project's is
a deviation and needs its spec's ``reason``; a reason on a setting that no longer differs is an error, as
is a deviation without one: the spec states every difference, and nothing else.

The released code is read, never copied into the project: the documents hold values and ``file:line``.
"""

from __future__ import annotations

import ast
import math
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
STATUSES = ("equal", "deviation", "not_applicable")


class ReferenceError(ValueError):
    """The released code has no value where a locator looks, or the spec and the project disagree silently."""


def scalar(text: str) -> Any:
    """A value written in a shell script or a YAML / Python source: a bool, int or float where it reads as one
    (``True``, ``8``, ``1e-6``), else the string without its quotes."""
    text = text.strip().rstrip(",")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclass(frozen=True)
class Located:
    """A value of the released code and where it stands (``path:line`` or ``path (what)``)."""

    value: Any
    source: str


@dataclass(frozen=True)
class Find:
    """The first line of ``path`` matching ``pattern`` at or after the first line matching ``after`` (a
    regex; None: the top); the value is its first group that matched, read by :func:`scalar` (``raw``: the
    string as it is)."""

    path: str
    pattern: str
    after: str | None = None
    raw: bool = False

    def locate(self, checkout: Path) -> Located:
        lines = (checkout / self.path).read_text().splitlines()
        start = 0
        if self.after is not None:
            start = next((i for i, line in enumerate(lines) if re.search(self.after, line)), None)
            if start is None:
                raise ReferenceError(f"{self.path}: no line matches {self.after!r}")
        for i in range(start, len(lines)):
            m = re.search(self.pattern, lines[i])
            if m:
                text = next(g for g in m.groups() if g is not None)
                return Located(text if self.raw else scalar(text), f"{self.path}:{i + 1}")
        raise ReferenceError(f"{self.path}: no line matches {self.pattern!r}" +
                             (f" after {self.after!r}" if self.after else ""))


_SHELL_REF = re.compile(r'^"?\$\{?(\w+)\}?"?$')


@dataclass(frozen=True)
class ShellValue:
    """The first group of the first line of a shell script ``path`` matching ``pattern`` (after ``after``), a
    reference to one of the script's variables (``$NAME``, ``${NAME}``, quoted or not) resolved to the value of
    its assignment (``NAME=value`` or ``NAME="value"``; both lines are the source); ``many``: the value's words as
    a list. Read by :func:`scalar` (``raw``: the string as it is)."""

    path: str
    pattern: str
    after: str | None = None
    many: bool = False
    raw: bool = False

    def locate(self, checkout: Path) -> Located:
        found = Find(self.path, self.pattern, self.after, raw=True).locate(checkout)
        text, source = str(found.value).strip(), found.source
        ref = _SHELL_REF.match(text)
        if ref:
            assigned = Find(self.path, rf'^{ref[1]}=(?:"([^"]*)"|(\S*))\s*(?:#.*)?$', raw=True).locate(checkout)
            text, source = str(assigned.value), f"{assigned.source}, {source.rsplit(':', 1)[1]}"
        text = text.strip('"')
        if self.many:
            return Located([w if self.raw else scalar(w) for w in text.split()], source)
        return Located(text if self.raw else scalar(text), source)


@dataclass(frozen=True)
class ShellArray:
    """The items of a shell array ``NAME=(...)`` (``declare -a`` or not, over one or more lines) of ``path``."""

    path: str
    name: str

    def locate(self, checkout: Path) -> Located:
        lines = (checkout / self.path).read_text().splitlines()
        opening = re.compile(rf"^\s*(?:declare -a )?{self.name}=\(")
        start = next((i for i, line in enumerate(lines) if opening.match(line)), None)
        if start is None:
            raise ReferenceError(f"{self.path}: no array {self.name}")
        end = next(i for i in range(start, len(lines)) if ")" in lines[i].split("#")[0])
        body = " ".join(line.split("#")[0] for line in lines[start:end + 1]).split("(", 1)[1].rsplit(")", 1)[0]
        return Located([scalar(w) for w in body.split()], f"{self.path}:{start + 1}-{end + 1}")


@dataclass(frozen=True)
class YamlKey:
    """The value of the dotted ``key`` of a YAML file read line by line (each part the first line at the next
    indent under the part before it): Hydra's defaults, with the line they stand on."""

    path: str
    key: str
    indent: int = 2

    def locate(self, checkout: Path) -> Located:
        lines = (checkout / self.path).read_text().splitlines()
        start, parts = 0, self.key.split(".")
        for depth, part in enumerate(parts):
            pattern = re.compile(rf"^{' ' * (depth * self.indent)}{re.escape(part)}:(.*)$")
            at = next((i for i in range(start, len(lines)) if pattern.match(lines[i])), None)
            if at is None:
                raise ReferenceError(f"{self.path}: no key {'.'.join(parts[:depth + 1])!r}")
            start = at + 1
        value = pattern.match(lines[at])[1].split(" #")[0].strip()
        return Located(scalar(value), f"{self.path}:{at + 1}")


@dataclass(frozen=True)
class FString:
    """The string assigned to ``var`` in function ``function`` of ``path`` (its first assignment of a string) as a
    ``str.format`` template: an f-string's literal braces doubled and its fields renamed by ``fields`` (the code's
    expression -> the project's text, e.g. ``num_variants -> {n}``); a plain string as it is (the code formats it
    itself, or it is no template: a literal, implicit concatenation included)."""

    path: str
    function: str
    var: str = "prompt"
    fields: Mapping[str, str] = field(default_factory=dict)

    def locate(self, checkout: Path) -> Located:
        tree = ast.parse((checkout / self.path).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == self.function:
                for st in ast.walk(node):
                    if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == self.var
                                                          for t in st.targets) and (
                            isinstance(st.value, ast.JoinedStr) or (isinstance(st.value, ast.Constant)
                                                                    and isinstance(st.value.value, str))):
                        if not isinstance(st.value, ast.JoinedStr):
                            return Located(ast.literal_eval(st.value), f"{self.path}:{st.lineno}")
                        text = "".join(p.value.replace("{", "{{").replace("}", "}}") if isinstance(p, ast.Constant)
                                       else self.fields.get(ast.unparse(p.value), "{" + ast.unparse(p.value) + "}")
                                       for p in st.value.values)
                        return Located(text, f"{self.path}:{st.lineno}")
        raise ReferenceError(f"{self.path}: no f-string {self.var} in function {self.function}")


@dataclass(frozen=True)
class Table:
    """A fact of a released data file (parquet): ``fact(frame)``, described by ``what``."""

    path: str
    fact: Callable[[Any], Any]
    what: str

    def locate(self, checkout: Path) -> Located:
        import pandas as pd

        return Located(self.fact(pd.read_parquet(checkout / self.path)), f"{self.path} ({self.what})")


@dataclass(frozen=True)
class Derived:
    """``combine(*values)`` of other located values; its source lists theirs."""

    combine: Callable[..., Any]
    parts: tuple

    def locate(self, checkout: Path) -> Located:
        got = [p.locate(checkout) for p in self.parts]
        return Located(self.combine(*(g.value for g in got)), ", ".join(g.source for g in got))


def argparse_default(path: str, flag: str) -> Find:
    """The ``default=`` of ``parser.add_argument("--flag", ...)`` (on its line or the next ones)."""
    return Find(path, r"default=([^,)]+)", after=rf'"{flag}"[,)]')


Locator = Find | ShellValue | ShellArray | YamlKey | FString | Table | Derived


@dataclass(frozen=True)
class Setting:
    """One setting of an experiment (module doc). ``project``: a dotted key of the resolved settings, None where
    the setting has no counterpart here (``reason`` then says why); ``expect(code value)``: the project's value
    that reproduces it; ``reason``: why the project differs on purpose (required exactly when it does);
    ``test``: the test (``path::name``) that pins the behaviour behind the value, where one does besides the
    reference's own."""

    name: str
    stage: str
    locate: Locator
    project: str | None
    reason: str | None = None
    expect: Callable[[Any], Any] | None = None
    test: str | None = None


def lookup(resolved: Mapping, key: str) -> Any:
    """The value at dotted ``key`` of the resolved settings (a missing key is an error naming it)."""
    node: Any = resolved
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ReferenceError(f"the project's resolved settings have no {key!r} (at {part!r})")
        node = node[part]
    return node


def same(a: Any, b: Any) -> bool:
    """Equal values; numbers within float rounding, sequences and mappings element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def entry(setting: Setting, code: Located, resolved: Mapping) -> dict:
    """The document's row of ``setting``: the code's value and source, the project's key, value and status."""
    row = {"name": setting.name, "stage": setting.stage, "value": code.value, "source": code.source,
           "project": setting.project, **({"test": setting.test} if setting.test else {})}
    if setting.project is None:
        if not setting.reason:
            raise ReferenceError(f"{setting.name}: not applicable without a reason")
        return {**row, "status": "not_applicable", "reason": setting.reason}
    expected = setting.expect(code.value) if setting.expect else code.value
    actual = lookup(resolved, setting.project)
    row["project_value"] = actual
    if same(expected, actual):
        if setting.reason:
            raise ReferenceError(f"{setting.name}: the project now equals the code ({actual!r}); drop its reason")
        return {**row, "status": "equal"}
    if not setting.reason:
        raise ReferenceError(f"{setting.name}: an unexplained difference: the code's {code.value!r} "
                             f"({code.source}) means {expected!r} here, the project has {actual!r} at "
                             f"{setting.project}")
    return {**row, "status": "deviation", "expected": expected, "reason": setting.reason}


def counts(rows: Sequence[dict]) -> dict[str, int]:
    return {"settings": len(rows), **{s: sum(r["status"] == s for r in rows) for s in STATUSES}}


def reference(experiment: dict, settings: Sequence[Setting], checkout: Path, resolved: Mapping) -> dict:
    """The reference document of ``experiment`` (its name, config, models, released code) from ``checkout``."""
    rows = [entry(s, s.locate.locate(checkout), resolved) for s in settings]
    return {"format": FORMAT, **experiment, "released_code": {**experiment["released_code"],
                                                              "commit": checkout_commit(checkout)},
            "counts": counts(rows), "settings": rows}


def refresh(document: dict, settings: Sequence[Setting], resolved: Mapping) -> dict:
    """``document`` with its project side recomputed from the committed code values (no checkout needed); the
    spec's settings must be the document's, in its order."""
    names = [r["name"] for r in document["settings"]]
    if names != [s.name for s in settings]:
        missing, extra = set(s.name for s in settings) - set(names), set(names) - set(s.name for s in settings)
        raise ReferenceError(f"{document['experiment']}: the spec and the committed reference list other settings "
                             f"(only in the spec: {sorted(missing)}, only in the reference: {sorted(extra)}); "
                             "regenerate it from the released code")
    rows = [entry(s, Located(r["value"], r["source"]), resolved) for s, r in zip(settings, document["settings"])]
    return {**document, "counts": counts(rows), "settings": rows}


def code_checkout(code_env: str | Mapping[str, str], environ: Mapping[str, str]) -> Path | dict[str, Path] | None:
    """A method's local checkout of its released code, named by the environment: ``code_env`` one variable (its
    path; None where unset) or, for a method whose parts have their own code, part -> variable (the parts whose
    variable is set; None where none is)."""
    if isinstance(code_env, str):
        return Path(environ[code_env]) if environ.get(code_env) else None
    return {part: Path(environ[v]) for part, v in code_env.items() if environ.get(v)} or None


def checkout_commit(checkout: Path) -> str:
    """The commit a checkout is at (``git rev-parse HEAD``)."""
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise ReferenceError(f"{checkout} is no git checkout of the released code: {done.stderr.strip()}")
    return done.stdout.strip()


def dump(document: dict) -> str:
    """The document as YAML (block strings for multi-line values), keys in the format's order."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        style = "|" if "\n" in value and not value.endswith((" ", "\t")) and "\r" not in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(document, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=120)


def load(path: str | Path) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text())


# -- the summary in docs/fidelity.md and the paper config's header ----------------------------------------
def summary(documents: Mapping[str, dict]) -> str:
    """Markdown: settings extracted per experiment and their statuses, then every named deviation with its
    reason (the experiments it holds for, or those it does not where they are fewer)."""
    lines = ["| experiment | settings extracted | equal | differ on purpose | not applicable | released code |",
             "|---|---|---|---|---|---|"]
    for name, doc in documents.items():
        c, code = doc["counts"], doc["released_code"]
        lines.append(f"| `{name}` ([reference](fidelity/{name}.yaml)) | {c['settings']} | {c['equal']} | "
                     f"{c['deviation']} | {c['not_applicable']} | {code['repo']}@{code['commit'][:7]} |")
    reasons: dict[tuple[str, str], list[str]] = {}
    for name, doc in documents.items():
        for row in doc["settings"]:
            if row["status"] == "deviation":
                reasons.setdefault((row["name"], row["reason"]), []).append(name)
    lines += ["", "Named deviations (the project differs on purpose; each reference has the code's value, its "
              "`file:line` and the project's):", ""]
    for (setting, reason), names in reasons.items():
        others = [n for n in documents if n not in names]
        where = ("" if not others else f" ({', '.join(names)})" if len(names) <= len(others)
                 else f" (all but {', '.join(others)})")
        lines.append(f"- `{setting}`{where}: {reason}")
    return "\n".join(lines)


def header_line(documents: Mapping[str, dict]) -> str:
    """One comment line for a paper config's header: each experiment's counts."""
    parts = [f"{name} {d['counts']['settings']} settings ({d['counts']['equal']} equal, {d['counts']['deviation']} "
             f"named deviations, {d['counts']['not_applicable']} n/a)" for name, d in documents.items()]
    return "# Fidelity (docs/fidelity/, tests/test_fidelity_reference.py): " + "; ".join(parts) + "."


def replace_block(text: str, tag: str, block: str) -> str:
    """``text`` with the lines between ``<!-- fidelity:<tag> -->`` and ``<!-- /fidelity:<tag> -->`` replaced by
    ``block`` (both markers must be there)."""
    begin, end = f"<!-- fidelity:{tag} -->", f"<!-- /fidelity:{tag} -->"
    if begin not in text or end not in text:
        raise ReferenceError(f"no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"


def replace_header_line(text: str, line: str) -> str:
    """A paper config's text with its ``# Fidelity`` header line replaced by ``line`` (it must have one)."""
    lines = text.splitlines(keepends=True)
    at = [i for i, ln in enumerate(lines) if ln.startswith("# Fidelity")]
    if len(at) != 1:
        raise ReferenceError(f"{len(at)} '# Fidelity' header lines; one needed")
    lines[at[0]] = line + "\n"
    return "".join(lines)
