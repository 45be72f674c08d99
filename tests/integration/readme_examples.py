"""readme_examples.py: the curl examples whose answers README.md and
docs/http-api.md show (completions; Messages and Responses), run as
written against a running server on configs/default.ini's stories260K;
each answer must be what the page shows. The examples are greedy and
stories260K's greedy text is the same on every host (test_golden), so a
page that drifts from the server fails here.

How a shown answer reads: an indented block of the JSON the server writes,
wrapped for the page; a line break inside a string stands for one space,
outside a string for nothing (the server writes no spaces between tokens).
`...` stands for an id's random part (`"id":"msg_..."`) or a timestamp
(`"created":...`) and for nothing else: every other field and the whole
text must be there as the server writes them. On a mismatch the server's
answer is printed wrapped and elided the same way, ready to paste.

Where: EXAMPLES names, per page, the text after which the first indented
block holding `curl` commands lies, which of its commands have a shown
answer, and those answers are the next indented blocks that start with
`{` (in command order, before the next `## ` heading).
Not for: the SDK example (docs_example.py), structured output
(readme_structured.sh).

usage: python3 readme_examples.py SOURCE_DIR BASE_URL
"""
import json
import re
import subprocess
import sys

from integ_http import wait_health

# (page, the text the example follows, the commands of its curl block that have a shown answer)
EXAMPLES = [
    ("README.md", "## Talk to it", [0]),
    ("README.md", "Agents' APIs too", [0, 1]),
    ("docs/http-api.md", "**`POST /v1/messages`**", [0]),
    ("docs/http-api.md", "**`POST /v1/responses`**", [0]),
]
PAGE_URL = "http://127.0.0.1:8080"
# the keys whose value `...` may stand for (or, in a string, its part after a prefix such as msg_)
ELIDABLE = re.compile(r'"(?:id|created|created_at)":"?[A-Za-z]*[-_]?$')
WIDTH = 92


def blocks(lines):
    """The indented (4-space) blocks of a page's lines as (first line index, [lines without the indent])."""
    out, cur, start = [], [], 0
    for i, line in enumerate(lines + [""]):
        if line.startswith("    "):
            if not cur:
                start = i
            cur.append(line[4:])
        elif cur:
            out.append((start, cur))
            cur = []
    return out


def find_example(text, anchor, want):
    """The example after anchor: ([command text], [shown answer text]) or a reason it is not there."""
    at = text.find(anchor)
    if at < 0:
        return None, f"no {anchor!r} on the page"
    lines = text[at:].split("\n")
    end = next((i for i, line in enumerate(lines) if i > 0 and line.startswith("## ")), len(lines))
    found = blocks(lines[:end])
    cmd_at = next((k for k, (_, b) in enumerate(found) if b[0].startswith("curl ")), None)
    if cmd_at is None:
        return None, f"no indented block of curl commands after {anchor!r}"
    cmds = []
    for line in found[cmd_at][1]:
        if line.startswith("curl "):
            cmds.append(line)
        else:
            cmds[-1] += "\n" + line
    answers = ["\n".join(b) for _, b in found[cmd_at + 1:] if b[0].startswith("{")]
    if max(want) >= len(cmds) or len(answers) < len(want):
        return None, (f"after {anchor!r}: {len(cmds)} commands and {len(answers)} answer blocks, "
                      f"for {len(want)} shown answers")
    return [cmds[k] for k in want], answers[:len(want)]


def pattern(shown):
    """The regular expression a shown answer stands for (see the top), or raises ValueError."""
    out, seen, i, in_str = [], "", 0, False
    while i < len(shown):
        c = shown[i]
        if shown.startswith("...", i):
            if not ELIDABLE.search(seen):
                raise ValueError(f"`...` after {seen[-40:]!r}: only an id or a timestamp may be elided")
            out.append(r'[^"\\]+' if in_str else r"[0-9]+")
            seen += "..."
            i += 3
            continue
        if in_str and c == "\\":
            out.append(re.escape(shown[i:i + 2]))
            seen += shown[i:i + 2]
            i += 2
            continue
        if c == "\n":
            i += 1
            while i < len(shown) and shown[i] == " ":
                i += 1
            if in_str:
                out.append(" ")
                seen += " "
            continue
        if c == '"':
            in_str = not in_str
        if c == " " and not in_str:
            i += 1
            continue
        out.append(re.escape(c))
        seen += c
        i += 1
    if in_str:
        raise ValueError("a shown answer ends inside a string")
    return re.compile("".join(out), re.S)


def elide(answer):
    """The server's answer with ids' random parts and timestamps as `...`, as a page shows them."""
    answer = re.sub(r'("id":"[A-Za-z]*[-_])[^"\\]+"', r'\1..."', answer)
    return re.sub(r'("(?:created|created_at)":)[0-9]+', r"\1...", answer)


def wrap(answer, width=WIDTH):
    """answer as page lines of at most width characters where it can: breaks after a comma
    outside a string, or in place of a single space inside one; continuation lines start with a space."""
    lines, cur, brk, in_str, i = [], "", None, False, 0
    while i < len(answer):
        c = answer[i]
        cur += c
        if in_str and c == "\\":
            cur += answer[i + 1]
            i += 2
            continue
        if c == '"':
            in_str = not in_str
        elif c == "," and not in_str:
            brk = (len(cur), False)
        elif (c == " " and in_str and len(cur) > 1 and cur[-2] != " "
              and i + 1 < len(answer) and answer[i + 1] not in ' "'):
            brk = (len(cur) - 1, True)
        if len(cur) > width and brk:
            at, space = brk
            lines.append(cur[:at])
            cur = " " + cur[at + (1 if space else 0):]
            brk = None
        i += 1
    lines.append(cur)
    return "\n".join("    " + line for line in lines)


def run(cmd, base):
    if PAGE_URL not in cmd:
        raise ValueError(f"the command does not ask {PAGE_URL}: {cmd!r}")
    p = subprocess.run(["bash", "-c", cmd.replace(PAGE_URL, base)], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise ValueError(f"the command exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout.strip()


def main():
    src, base = sys.argv[1], sys.argv[2]
    if not wait_health(base):
        print("FAIL: the server never answered /health with 200")
        return 1
    fails, checked = 0, 0
    for page, anchor, want in EXAMPLES:
        with open(f"{src}/{page}", encoding="utf-8") as f:
            text = f.read()
        cmds, answers = find_example(text, anchor, want)
        if cmds is None:
            print(f"FAIL: {page}: {answers}")
            fails += 1
            continue
        for cmd, shown in zip(cmds, answers):
            first = cmd.splitlines()[0].rstrip(" \\")
            where = f"{page}, after {anchor!r}: {first}"
            try:
                pat = pattern(shown)
                got = run(cmd, base)
                json.loads(got)
            except (ValueError, subprocess.TimeoutExpired) as e:
                print(f"FAIL: {where}: {e}")
                fails += 1
                continue
            if not pat.fullmatch(got):
                print(f"FAIL: {where}: the page shows\n{shown}\nbut the server answers\n{wrap(elide(got))}")
                fails += 1
                continue
            # the check can fail: the page with one letter changed (the first past the middle) must not match
            k = next(k for k in range(len(shown) // 2, len(shown)) if shown[k].isalpha())
            if pattern(shown[:k] + ("y" if shown[k] == "x" else "x") + shown[k + 1:]).fullmatch(got):
                print(f"FAIL: {where}: the check took the page with a letter changed")
                fails += 1
                continue
            checked += 1
    print(f"readme_examples.py: {checked} shown answers match the server, {fails} do not")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
