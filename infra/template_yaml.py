"""Reads a CloudFormation/SAM template written in YAML, with no third-party import (so
`python3 infra/cost.py` runs on any Python 3, as infra/aws_rules.py does).

It reads the block YAML templates are written in: block mappings and sequences, flow
collections (`[a, b]`, `{ k: v }`), quoted and plain scalars (with continuation lines), block
scalars (`|`, `>`, with `-`/`+`), comments, and CloudFormation's short tags, which become their
long form (`!Ref X` is `{"Ref": "X"}`, `!GetAtt A.B` is `{"Fn::GetAtt": "A.B"}`, `!Sub s` is
`{"Fn::Sub": s}`). Anchors, aliases, documents and complex keys are refused, not guessed at.

    python3 infra/template_yaml.py template.yaml
        compares this reader with PyYAML (when installed) on the file: "template_yaml: same"
"""

import json
import re
import sys


class Unsupported(ValueError):
    pass


def tagged(tag, value):
    """CloudFormation's long form of a short tag."""
    name = tag[1:]
    if name == "Ref":
        return {"Ref": value}
    if name == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value}
    return {"Fn::" + name: value}


_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def plain(text):
    """A plain scalar's value, resolved as YAML 1.1's core schema does for what templates use."""
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if text in ("null", "Null", "NULL", "~", ""):
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text) and any(c.isdigit() for c in text):
        return float(text)
    return text


def strip_comment(line):
    """The line without its comment (a `#` at the start or after white space, outside quotes)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                if quote == "'" and line[i + 1:i + 2] == "'":
                    i += 2
                    continue
                quote = None
        elif c in "'\"" and (i == 0 or line[i - 1] in " \t[{,:"):
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
        i += 1
    return line.rstrip()


class Flow:
    """An inline value: a scalar, a tag and its value, or a flow collection."""

    def __init__(self, text):
        self.s = text
        self.i = 0

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\n":
            self.i += 1

    def value(self, flow):
        self.ws()
        s = self.s
        if self.i >= len(s):
            return None
        c = s[self.i]
        if c in "&*":
            raise Unsupported(f"anchors and aliases: {s!r}")
        if c == "!":
            m = re.compile(r"![A-Za-z:]+").match(s, self.i)
            self.i = m.end()
            self.ws()
            if self.i >= len(s) or s[self.i] in ",]}":
                return tagged(m.group(0), "")
            return tagged(m.group(0), self.value(flow))
        if c == "[":
            self.i += 1
            items = []
            while True:
                self.ws()
                if s[self.i] == "]":
                    self.i += 1
                    return items
                items.append(self.value(True))
                self.ws()
                if s[self.i] == ",":
                    self.i += 1
        if c == "{":
            self.i += 1
            out = {}
            while True:
                self.ws()
                if s[self.i] == "}":
                    self.i += 1
                    return out
                key = self.key()
                self.ws()
                if s[self.i] == ":":
                    self.i += 1
                    out[key] = self.value(True)
                else:
                    out[key] = None
                self.ws()
                if s[self.i] == ",":
                    self.i += 1
        if c == "'":
            return self.single()
        if c == '"':
            return self.double()
        start = self.i
        if flow:
            while self.i < len(s) and s[self.i] not in ",]}" and not (s[self.i] == ":" and s[self.i + 1:self.i + 2] in (" ", "")):
                self.i += 1
        else:
            self.i = len(s)
        return plain(" ".join(p.strip() for p in s[start:self.i].split("\n")).strip())

    def key(self):
        c = self.s[self.i]
        if c == "'":
            return self.single()
        if c == '"':
            return self.double()
        start = self.i
        while self.s[self.i] not in ":,}":
            self.i += 1
        return self.s[start:self.i].strip()

    def single(self):
        s = self.s
        self.i += 1
        out = []
        while True:
            c = s[self.i]
            if c == "'":
                if s[self.i + 1:self.i + 2] == "'":
                    out.append("'")
                    self.i += 2
                    continue
                self.i += 1
                return fold("".join(out))
            out.append(c)
            self.i += 1

    def double(self):
        s = self.s
        self.i += 1
        out = []
        escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/", "0": "\0", " ": " "}
        while True:
            c = s[self.i]
            if c == "\\":
                nxt = s[self.i + 1]
                if nxt == "\n":
                    self.i += 2
                    while s[self.i] in " \t":
                        self.i += 1
                    continue
                if nxt not in escapes:
                    raise Unsupported(f"escape \\{nxt}")
                out.append(escapes[nxt])
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return fold("".join(out))
            out.append(c)
            self.i += 1


def fold(text):
    """A quoted scalar's line breaks as YAML folds them: one break a space, n+1 breaks n."""
    if "\n" not in text:
        return text
    lines = [l.strip() for l in text.split("\n")]
    out = lines[0]
    blank = 0
    for l in lines[1:]:
        if l == "":
            blank += 1
            continue
        out += ("\n" * blank if blank else " ") + l
        blank = 0
    return out


def balanced(text):
    """Whether TEXT closes every bracket and quote it opens."""
    depth = 0
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                if quote == "'" and text[i + 1:i + 2] == "'":
                    i += 2
                    continue
                quote = None
        elif c in "'\"" and (i == 0 or text[i - 1] in " \t[{,:!"):
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return depth <= 0 and quote is None


class Reader:
    def __init__(self, text):
        if re.search(r"^ *\t", text, re.M):
            raise Unsupported("tabs for indentation")
        self.raw = text.split("\n")
        self.lines = [strip_comment(l) for l in self.raw]
        self.i = 0

    def skip(self):
        while self.i < len(self.lines) and self.lines[self.i].strip() == "":
            self.i += 1

    def indent(self):
        self.skip()
        if self.i >= len(self.lines):
            return -1
        l = self.lines[self.i]
        return len(l) - len(l.lstrip(" "))

    def document(self):
        self.skip()
        if self.i < len(self.lines) and self.lines[self.i].startswith(("---", "%")):
            raise Unsupported("document markers")
        return self.block(0)

    def block(self, indent):
        at = self.indent()
        if at < indent:
            return None
        text = self.lines[self.i].strip()
        if text == "-" or text.startswith("- "):
            return self.sequence(at)
        return self.mapping(at)

    def sequence(self, indent):
        out = []
        while self.indent() == indent:
            text = self.lines[self.i].strip()
            if not (text == "-" or text.startswith("- ")):
                break
            rest = text[1:].strip()
            if rest == "":
                self.i += 1
                out.append(self.block(indent + 1))
            elif self.is_key(rest):
                # A mapping begun on the dash's line: its keys are indented past the dash.
                inner = indent + (len(text) - len(rest))
                self.lines[self.i] = " " * inner + rest
                out.append(self.mapping(inner))
            else:
                self.i += 1
                out.append(self.inline(rest, indent))
        return out

    @staticmethod
    def is_key(text):
        if text[0] in "[{!&*|>":
            return False
        if text[0] in "'\"":
            f = Flow(text)
            f.single() if text[0] == "'" else f.double()
            return text[f.i:].lstrip().startswith(":")
        m = re.match(r"^[^\s#][^#]*?:(\s|$)", text)
        return bool(m)

    def mapping(self, indent):
        out = {}
        while self.indent() == indent:
            text = self.lines[self.i].strip()
            if text.startswith("- ") or text == "-":
                break
            if text[0] in "'\"":
                f = Flow(text)
                key = f.single() if text[0] == "'" else f.double()
                rest = text[f.i:].lstrip()[1:].strip()
            else:
                m = re.match(r"^([^\s#][^#]*?):(\s+(.*))?$", text)
                if not m:
                    raise Unsupported(f"line {self.i + 1}: {text!r}")
                key, rest = m.group(1).strip(), (m.group(3) or "").strip()
            if key in out:
                raise Unsupported(f"line {self.i + 1}: duplicate key {key}")
            self.i += 1
            out[key] = self.value(rest, indent)
        return out

    def value(self, rest, indent):
        """The value after `key:` (REST, on the key's line), its block below it at INDENT+."""
        tag = None
        m = re.match(r"^(![A-Za-z:]+)\s*$", rest)
        if m:
            tag, rest = m.group(1), ""
        if rest == "":
            nxt = self.indent()
            if nxt > indent or (nxt == indent and self.lines[self.i].strip().startswith("- ")):
                v = self.block(nxt)
            else:
                v = None
            return tagged(tag, v) if tag else v
        if rest[0] in "|>":
            return self.block_scalar(rest, indent)
        return self.inline(rest, indent)

    def inline(self, rest, indent):
        """A value written on its line, continued on more-indented lines when open or plain."""
        text = rest
        while not balanced(text) and self.i < len(self.lines):
            text += "\n" + self.lines[self.i]
            self.i += 1
        if not balanced(text):
            raise Unsupported(f"unclosed value {rest!r}")
        if text[0] not in "[{'\"!":
            while self.indent() > indent:
                text += "\n" + self.lines[self.i].strip()
                self.i += 1
        f = Flow(text)
        v = f.value(False)
        if text[f.i:].strip():
            raise Unsupported(f"after the value: {text[f.i:]!r}")
        return v

    def block_scalar(self, header, indent):
        m = re.match(r"^([|>])([-+]?)\s*$", header)
        if not m:
            raise Unsupported(f"block scalar header {header!r}")
        style, chomp = m.groups()
        lines = []
        body = None
        while self.i < len(self.raw):
            raw = self.raw[self.i]
            if raw.strip() == "":
                lines.append("")
                self.i += 1
                continue
            at = len(raw) - len(raw.lstrip(" "))
            if at <= indent:
                break
            body = at if body is None else body
            lines.append(raw[body:])
            self.i += 1
        trailing = 0
        while lines and lines[-1] == "":
            lines.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(lines)
        else:
            text = ""
            for k, l in enumerate(lines):
                if k == 0:
                    text = l
                elif l == "" or lines[k - 1] == "":
                    text += "\n" if l == "" else l
                else:
                    text += " " + l
        if chomp == "-":
            return text
        if chomp == "+":
            return text + "\n" * (trailing + 1)
        return text + "\n"


def load(text):
    return Reader(text).document()


def load_file(path):
    with open(path, encoding="utf-8") as f:
        return load(f.read())


def _pyyaml(text):
    import yaml  # only for the comparison

    class Loader(yaml.SafeLoader):
        pass

    def construct(loader, suffix, node):
        if isinstance(node, yaml.ScalarNode):
            v = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            v = loader.construct_sequence(node, deep=True)
        else:
            v = loader.construct_mapping(node, deep=True)
        return tagged("!" + suffix, v)

    Loader.add_multi_constructor("!", construct)
    return yaml.load(text, Loader=Loader)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "template.yaml"
    text = open(path, encoding="utf-8").read()
    mine = load(text)
    try:
        theirs = _pyyaml(text)
    except ImportError:
        print("template_yaml: PyYAML is not installed; nothing to compare")
        return
    if json.dumps(mine, sort_keys=True) != json.dumps(theirs, sort_keys=True, default=str):
        for k in sorted(set(mine) | set(theirs)):
            a, b = mine.get(k), theirs.get(k)
            if isinstance(a, dict) and isinstance(b, dict):
                for kk in sorted(set(a) | set(b)):
                    if json.dumps(a.get(kk), sort_keys=True) != json.dumps(b.get(kk), sort_keys=True, default=str):
                        print(f"{k}/{kk}:\n  mine   {json.dumps(a.get(kk))[:600]}\n  PyYAML {json.dumps(b.get(kk), default=str)[:600]}")
            elif a != b:
                print(f"{k}:\n  mine   {a!r}\n  PyYAML {b!r}")
        raise SystemExit("template_yaml: differs from PyYAML")
    print("template_yaml: same")


if __name__ == "__main__":
    main()
