"""A small Dockerfile reader: instructions with their stage, continuation lines
joined, comments dropped. Enough for the structural checks in
test_dockerfiles.py (hadolint does the style checks)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field


@dataclass
class Instruction:
    cmd: str  # upper-case keyword
    rest: str  # everything after the keyword
    stage: int  # index of the FROM it belongs to (-1 = before the first FROM)
    line: int

    def words(self) -> list[str]:
        return shlex.split(self.rest, posix=True)

    def flags_and_args(self) -> tuple[dict[str, str], list[str]]:
        """--flag=value options (COPY --from=..., RUN --mount=...) and the rest."""
        flags: dict[str, str] = {}
        args: list[str] = []
        for w in self.words():
            if w.startswith("--") and not args:
                k, _, v = w[2:].partition("=")
                flags.setdefault(k, v)
            else:
                args.append(w)
        return flags, args

    def exec_form(self) -> list[str]:
        value = json.loads(self.rest)
        assert isinstance(value, list), f"line {self.line}: {self.cmd} is not in exec (JSON) form"
        return value


@dataclass
class Stage:
    index: int
    base: str
    alias: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]


@dataclass
class Dockerfile:
    path: str
    instructions: list[Instruction]
    stages: list[Stage]
    global_args: dict[str, str]

    @classmethod
    def parse(cls, path: str, text: str) -> "Dockerfile":
        instructions: list[Instruction] = []
        stages: list[Stage] = []
        global_args: dict[str, str] = {}
        buf = ""
        start = 0
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.rstrip()
            if not buf and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if buf and line.lstrip().startswith("#"):
                continue  # comment inside a continued instruction
            if not buf:
                start = n
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            keyword, _, rest = buf.strip().partition(" ")
            inst = Instruction(keyword.upper(), rest.strip(), len(stages) - 1, start)
            buf = ""
            if inst.cmd == "FROM":
                m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", inst.rest, re.I)
                assert m, f"{path}:{start}: cannot read FROM {inst.rest!r}"
                stages.append(Stage(len(stages), m.group(1), m.group(2)))
                inst.stage = len(stages) - 1
            elif inst.cmd == "ARG" and not stages:
                k, _, v = inst.rest.partition("=")
                global_args[k.strip()] = v.strip().strip('"')
            if stages and inst.cmd != "FROM":
                stages[-1].instructions.append(inst)
            instructions.append(inst)
        assert not buf, f"{path}: ends inside a continued instruction"
        return cls(path, instructions, stages, global_args)

    def resolve(self, value: str) -> str:
        """Expands ${ARG} / $ARG with the global ARG defaults."""
        return re.sub(
            r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
            lambda m: self.global_args.get(m.group(1), m.group(0)),
            value,
        )

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, alias: str) -> Stage:
        found = [s for s in self.stages if s.alias == alias]
        assert len(found) == 1, f"{self.path}: no stage {alias}"
        return found[0]
