#!/usr/bin/env python3
"""Checks that the documentation still matches the repository.

Docs drift: a file is renamed and a link to it dies, a flag is renamed and the
command a reader copies fails, a CMake option is added and nobody lists it.
This script finds four kinds of drift in README.md, docs/**/*.md and
tools/**/*.md, and prints one line per problem as `FILE:LINE: problem`
(exit status 1 when there is any):

1. links: a relative markdown link `[text](path)`, `[text](path#anchor)` or
   `[text](#anchor)` must resolve. The path (a file or a folder) must exist
   relative to the doc, and an anchor must name a heading of the target .md
   file under GitHub's slug rules. Web links and links in code are not checked.
2. paths: a repository path written in backticks, such as `nn/tcn.h:120` or
   `tools/plot OUT.png RUN.csv`, must exist (the first word of the span, from
   the repository root or from the doc's folder). Only spans that start with a
   source folder are paths; build/, runs/ and data/ are generated and are not
   checked; spans with `*`, `{`, `<` or `...` are patterns, not paths.
3. flags: a `--flag` written after a program name, as in
   `build/charlm train --max_steps 100` (in one backtick span or one command of
   a fenced code block), must appear in that program's --help. This runs the
   Release build's programs in build/ (with --no-programs it is skipped).
4. cmake: every `-DTCN_...` in the docs must be a cache variable that the
   top-level CMakeLists.txt declares (`option(` or `set(... CACHE ...)`, not
   INTERNAL), and README.md must mention every one of them.
5. figures: every figure in the README's results table (a number with a
   decimal point or an exponent, or of three digits or more) must appear in a
   doc that its row links to, where the figure lives with its command and date:
   the README repeats figures, it is not where they are measured.

It uses only Python's standard library and takes a couple of seconds; CI runs it
as `python3 tools/check_docs.py`. `--self-test` plants one problem of each kind
in a small temporary repository and checks that exactly those are found, so
the checker cannot silently pass.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import unquote

# A backtick span is a repository path when it starts with one of these.
SOURCE_PREFIXES = ("CMakeLists.txt", "README.md", "core/", "autograd/", "nn/", "ops/",
                   "cuda/", "tests/", "examples/", "tools/", "docs/", "scripts/", ".ci/")

# Markers of a path pattern or placeholder (`cuda/*.cu`, `nn/models.{h,cpp}`,
# `ops/<name>.cpp`, `examples/...`): such spans are not checked.
PATTERN_MARKERS = ("*", "{", "<", "...")

# The programs whose flags are checked, and where the Release build puts them.
PROGRAMS = {
    "charlm": "build/charlm",
    "wordlm": "build/wordlm",
    "adding": "build/examples/tasks/adding",
    "copymem": "build/examples/tasks/copymem",
    "forecast": "build/examples/tasks/forecast",
    "bench_checkpoint": "build/bench_checkpoint",
    "bench_gemm": "build/bench_gemm",
    "bench_conv": "build/bench_conv",
    "bench_ops": "build/bench_ops",
    "bench_cudnn": "build/bench_cudnn",
}

# Shell words that end one command and start the next.
COMMAND_SEPARATORS = {"|", "||", "&&", ";", "&"}


@dataclass
class Problem:
    file: str  # relative to the repository root
    line: int
    check: str  # "link", "path", "flag" or "cmake"
    message: str

    def __str__(self):
        return f"{self.file}:{self.line}: {self.check}: {self.message}"


# ---------------------------------------------------------------------------
# Reading markdown
# ---------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


@dataclass
class CodeSpan:
    """The text of a backtick span, as (line number, text) pieces: a span may
    continue over several lines of a paragraph."""
    pieces: list

    @property
    def line(self):
        return self.pieces[0][0]

    @property
    def text(self):
        return " ".join(text for _, text in self.pieces).strip()


@dataclass
class Doc:
    """A markdown file split into what markdown renders as text (prose) and
    what it renders as code."""
    root: str
    rel: str
    lines: list = field(default_factory=list)  # without line ends
    fenced: list = field(default_factory=list)  # per line: inside a fenced code block?

    @property
    def folder(self):
        return os.path.dirname(os.path.join(self.root, self.rel))

    @staticmethod
    def read(root, rel):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            doc = Doc(root, rel, f.read().splitlines())
        doc.fenced = fenced_lines(doc.lines)
        return doc

    def paragraphs(self):
        """Yield (first line number, text) for each run of prose lines between
        blank lines and code blocks: markdown's inline syntax never crosses them."""
        start, block = None, []
        for number, (line, fenced) in enumerate(zip(self.lines, self.fenced), 1):
            if fenced or not line.strip():
                if block:
                    yield start, "\n".join(block)
                start, block = None, []
            else:
                if not block:
                    start = number
                block.append(line)
        if block:
            yield start, "\n".join(block)

    def code_spans(self):
        """Every backtick span of the prose."""
        spans = []
        for start, text in self.paragraphs():
            for begin, end, content_begin, content_end in find_code_spans(text):
                pieces = []
                offset = content_begin
                for piece in text[content_begin:content_end].split("\n"):
                    pieces.append((start + text.count("\n", 0, offset), piece))
                    offset += len(piece) + 1
                spans.append(CodeSpan(pieces))
        return spans

    def fenced_commands(self):
        """Every command line of the fenced code blocks, a line ending in a
        backslash joined with the next, as (line number, text) pieces."""
        commands, pending = [], []
        for number, (line, fenced) in enumerate(zip(self.lines, self.fenced), 1):
            if not fenced or FENCE.match(line):
                pending = []
                continue
            if line.rstrip().endswith("\\"):
                pending.append((number, line.rstrip()[:-1]))
                continue
            commands.append(CodeSpan(pending + [(number, line)]))
            pending = []
        return commands


def fenced_lines(lines):
    """Per line, whether it belongs to a fenced code block (fences included)."""
    inside = []
    fence = None  # the opening fence's character and length while inside
    for line in lines:
        match = FENCE.match(line)
        if fence is None:
            if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
                fence = (match.group(1)[0], len(match.group(1)))
            inside.append(fence is not None)
        else:
            inside.append(True)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= fence[1] \
                    and not match.group(2).strip():
                fence = None
    return inside


def find_code_spans(text):
    """(begin, end, content begin, content end) of each backtick span in a
    paragraph, as CommonMark pairs them: a run of N backticks closes at the
    next run of exactly N backticks."""
    spans = []
    runs = [m for m in re.finditer(r"`+", text)]
    i = 0
    while i < len(runs):
        opening = runs[i]
        escaped = (len(text[:opening.start()]) - len(text[:opening.start()].rstrip("\\"))) % 2 == 1
        closing = None
        if not escaped:
            for j in range(i + 1, len(runs)):
                if len(runs[j].group()) == len(opening.group()):
                    closing = j
                    break
        if closing is None:
            i += 1
            continue
        spans.append((opening.start(), runs[closing].end(), opening.end(), runs[closing].start()))
        i = closing + 1
    return spans


def mask_code_spans(text):
    """The paragraph with its code spans blanked out (line breaks kept), so
    that link syntax written inside code is not taken for a link."""
    chars = list(text)
    for begin, end, _, _ in find_code_spans(text):
        for k in range(begin, end):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


def find_docs(root):
    """README.md, docs/**/*.md and tools/**/*.md, relative to the root, sorted;
    nothing under a build*/ or data/ folder."""
    docs = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    for top in ("docs", "tools"):
        for folder, subfolders, files in os.walk(os.path.join(root, top)):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith("build") and d != "data")
            for name in sorted(files):
                if name.endswith(".md"):
                    docs.append(os.path.relpath(os.path.join(folder, name), root))
    return docs


# ---------------------------------------------------------------------------
# Check 1: links
# ---------------------------------------------------------------------------

# [text](target) or ![alt](target), with an optional "title"; the text may hold
# one level of brackets, the target one level of parentheses.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
                  r"\(\s*<?((?:[^()\s<>]|\([^()\s]*\))*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def github_slug(heading):
    """The anchor GitHub gives a heading: its rendered text in lower case,
    without characters other than letters, digits, '-', '_' and spaces, then
    spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags show nothing
    # Underscores that open or close emphasis (_word_) are not shown; inside
    # code spans and words (tcn_sanitize) they are.
    parts = re.split(r"(`[^`]*`)", text)
    text = "".join(part if part.startswith("`") else re.sub(r"(?<!\w)_+|_+(?!\w)", "", part)
                   for part in parts)
    text = "".join(c for c in text.strip().lower() if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def heading_anchors(doc):
    """The anchors a markdown file offers: its headings' slugs (a repeated
    slug gets -1, -2, ...) and explicit HTML ids and names."""
    headings = []
    for index, (line, fenced) in enumerate(zip(doc.lines, doc.fenced)):
        if fenced:
            continue
        match = ATX_HEADING.match(line)
        if match:
            headings.append(match.group(2) or "")
        elif SETEXT_UNDERLINE.match(line) and index > 0 and not doc.fenced[index - 1]:
            previous = doc.lines[index - 1]
            if previous.strip() and not re.match(r"^\s*([-*+>|#]|\d+[.)])", previous):
                headings.append(previous.strip())
    anchors, seen = set(), {}
    for heading in headings:
        slug = github_slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    for line in doc.lines:
        anchors.update(re.findall(r"""<[^>]*\b(?:id|name)\s*=\s*["']([^"']+)["']""", line))
    return anchors


def check_links(root, docs):
    problems = []
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            anchor_cache[path] = heading_anchors(Doc.read(root, os.path.relpath(path, root)))
        return anchor_cache[path]

    for doc in docs:
        for start, text in doc.paragraphs():
            masked = mask_code_spans(text)
            for match in LINK.finditer(masked):
                target = match.group(1)
                line = start + masked.count("\n", 0, match.start(1))
                if not target or URL_SCHEME.match(target):
                    continue  # http(s), mailto, ...: not ours to check
                path, _, anchor = target.partition("#")
                path, anchor = unquote(path.partition("?")[0]), unquote(anchor)
                if not path:
                    resolved = os.path.join(root, doc.rel)
                elif path.startswith("/"):
                    resolved = os.path.normpath(os.path.join(root, path.lstrip("/")))
                else:
                    resolved = os.path.normpath(os.path.join(doc.folder, path))
                if os.path.relpath(resolved, root).startswith(".."):
                    problems.append(Problem(doc.rel, line, "link",
                                            f"({target}) points outside the repository"))
                    continue
                if not os.path.exists(resolved):
                    problems.append(Problem(doc.rel, line, "link",
                                            f"({target}): {os.path.relpath(resolved, root)} does not exist"))
                    continue
                if not anchor:
                    continue
                if os.path.isdir(resolved):
                    resolved = os.path.join(resolved, "README.md")  # GitHub shows a folder's README
                if not resolved.endswith(".md") or not os.path.isfile(resolved):
                    continue  # anchors into code (#L10) or other files: not checked
                if anchor not in anchors_of(resolved):
                    problems.append(Problem(doc.rel, line, "link",
                                            f"({target}): no heading #{anchor} in "
                                            f"{os.path.relpath(resolved, root)}"))
    return problems


# ---------------------------------------------------------------------------
# Check 2: paths in backticks
# ---------------------------------------------------------------------------

def path_of_span(span_text):
    """The repository path a backtick span names, or None when the span is not
    a path or is a pattern. The first word counts (`tools/plot OUT.png RUN.csv`
    names tools/plot), without a trailing :LINE or :NAME, (...), #anchor or
    punctuation."""
    if not span_text.startswith(SOURCE_PREFIXES):
        return None
    if any(marker in span_text for marker in PATTERN_MARKERS):
        return None
    path = span_text.split()[0]
    path = re.split(r"[:(#]", path, maxsplit=1)[0]
    return path.rstrip(".,;!?'\")]") or None


def check_paths(root, docs):
    problems = []
    for doc in docs:
        for span in doc.code_spans():
            path = path_of_span(span.text)
            if path is None:
                continue
            candidates = [os.path.join(root, path), os.path.join(doc.folder, path)]
            exists = os.path.isdir if path.endswith("/") else os.path.exists
            if not any(exists(candidate) for candidate in candidates):
                problems.append(Problem(doc.rel, span.line, "path", f"`{path}` does not exist"))
    return problems


# ---------------------------------------------------------------------------
# Check 3: flags next to a program
# ---------------------------------------------------------------------------

WORD = re.compile(r""""[^"]*"|'[^']*'|\S+""")
FLAG = re.compile(r"^[\[(]*(--[A-Za-z0-9][\w-]*)")


@dataclass
class Help:
    """What a program's --help lists: its flags and its subcommands."""
    flags: set
    subcommands: set


@dataclass
class ProgramHelp:
    top: Help
    subcommands: dict  # subcommand -> Help

    def flags(self, subcommand):
        """The flags accepted after the subcommand; with none given, any
        subcommand's."""
        if subcommand is not None:
            return self.subcommands[subcommand].flags
        return self.top.flags.union(*(h.flags for h in self.subcommands.values()))


def parse_help(text):
    """Flags and subcommands of a CLI11 --help: under "Options:", a line
    indented by a few spaces that starts with the option's names
    ("  -n,--chars INT=200 ..."); under "Subcommands:", a name per line."""
    flags, subcommands, section = set(), set(), None
    for line in text.splitlines():
        if re.match(r"^\S.*:\s*$", line):
            section = line.strip().rstrip(":").lower()
        elif section == "options" and (m := re.match(r"^ {1,4}(-\S+)", line)):
            flags.update(name for name in m.group(1).split(",") if name.startswith("--"))
        elif section == "subcommands" and (m := re.match(r"^ {1,4}([A-Za-z][\w-]*)", line)):
            subcommands.add(m.group(1))
    if not flags:  # not CLI11's layout: every --word of the text
        flags = set(re.findall(r"--[A-Za-z0-9][\w-]*", text))
    return Help(flags, subcommands)


def run_help(command):
    """What `command --help` prints (stdout and stderr), or "" when it cannot run."""
    try:
        result = subprocess.run(command + ["--help"], stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout + result.stderr


def load_program_help(executable):
    """The top-level --help of a program and, when it has subcommands, every
    subcommand's (run in parallel: each is a process start)."""
    top = parse_help(run_help([executable]))
    names = sorted(top.subcommands)
    with ThreadPoolExecutor() as pool:
        helps = pool.map(lambda sub: parse_help(run_help([executable, sub])), names)
    return ProgramHelp(top, dict(zip(names, helps)))


def words(span):
    """(line number, word) of a command, quoted strings kept whole, without a
    shell comment: comments are prose about other programs' flags too
    (`mpirun ... build/charlm train  # add --allow-run-as-root as root`)."""
    result = []
    for number, text in span.pieces:
        for match in WORD.finditer(text):
            if match.group().startswith("#"):
                break
            result.append((number, match.group()))
    return result


def program_name(word):
    """The program a word runs (build/charlm, build-emu/charlm, charlm), or
    None. A source path such as examples/charlm is the folder, not the program."""
    word = word.strip("\"'")
    name = word.rsplit("/", 1)[-1]
    if name not in PROGRAMS or word.startswith(SOURCE_PREFIXES):
        return None
    return name


@dataclass
class Run:
    """A program run written in a doc: `build/charlm train --lr 2 --nope`."""
    line: int
    program: str
    subcommand: str  # or None
    flags: list  # (line number, --flag)


def program_runs(span, subcommands_of):
    """The runs of our programs in a span or command line, each with the flags
    from its name (and subcommand) to the end of its command (a separator such
    as | or &&, or a bare --)."""
    runs = []
    tokens = words(span)
    i = 0
    while i < len(tokens):
        line, word = tokens[i]
        name = program_name(word)
        # A program name right after an option is that option's value, not a
        # command: `check_training.py --wordlm build/wordlm --steps 20`.
        if name is None or (i > 0 and tokens[i - 1][1].startswith("-")):
            i += 1
            continue
        run = Run(line, name, None, [])
        runs.append(run)
        i += 1
        if i < len(tokens) and tokens[i][1] in subcommands_of(name):
            run.subcommand = tokens[i][1]
            i += 1
        while i < len(tokens):
            line, word = tokens[i]
            if word in COMMAND_SEPARATORS or word == "--":
                break
            if (match := FLAG.match(word)):
                run.flags.append((line, match.group(1)))
            if word.endswith(";"):
                break
            i += 1
    return runs


def commands(doc):
    """The places where a doc writes commands: backtick spans of the prose and
    lines of the fenced code blocks, in the order of the doc."""
    return sorted(doc.code_spans() + doc.fenced_commands(), key=lambda span: span.line)


def check_flags(root, docs):
    # First the programs the docs run, so that each --help runs once, and a
    # missing program is reported once, where the docs first run it.
    first_run = {}  # program -> (file, line)
    for doc in docs:
        for span in commands(doc):
            for run in program_runs(span, lambda name: set()):
                first_run.setdefault(run.program, (doc.rel, run.line))
    present = [name for name in sorted(first_run)
               if os.access(os.path.join(root, PROGRAMS[name]), os.X_OK)]
    problems = []
    for name in sorted(set(first_run) - set(present)):
        file, line = first_run[name]
        problems.append(Problem(file, line, "flag", f"{PROGRAMS[name]} does not exist, so its flags "
                                "are not checked (build Release into build/, or pass --no-programs)"))
    with ThreadPoolExecutor() as pool:
        loaded = pool.map(lambda name: load_program_help(os.path.join(root, PROGRAMS[name])), present)
        helps = dict(zip(present, loaded))
    for name in present:
        if "--help" not in helps[name].top.flags:  # CLI11 lists it first, always
            file, line = first_run[name]
            problems.append(Problem(file, line, "flag", f"`{PROGRAMS[name]} --help` lists no options "
                                    "(did it fail?), so its flags are not checked"))
            del helps[name]

    def subcommands_of(name):
        return helps[name].subcommands if name in helps else set()

    for doc in docs:
        for span in commands(doc):
            for run in program_runs(span, subcommands_of):
                if run.program not in helps:
                    continue
                accepted = helps[run.program].flags(run.subcommand)
                command = PROGRAMS[run.program] + (f" {run.subcommand}" if run.subcommand else "")
                where = f"`{command} --help`" if run.subcommand or not helps[run.program].subcommands \
                    else f"any `{command} SUBCOMMAND --help`"
                for line, flag in run.flags:
                    if flag not in accepted:
                        problems.append(Problem(doc.rel, line, "flag", f"{flag} is not in {where}"))
    return problems


# ---------------------------------------------------------------------------
# Check 4: CMake options
# ---------------------------------------------------------------------------

CMAKE_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[^\s"]+')
OPTION_NAME = re.compile(r"(?<![A-Za-z0-9_])TCN_[A-Z0-9_]+")
DEFINE = re.compile(r"(?<![\w-])-D\s*(TCN_[A-Z0-9_]+)")


def cmake_commands(text):
    """(name, argument words, line) of each command call in CMake code; a
    quoted argument keeps its quotes, and parentheses inside quotes or nested
    ones do not end the call."""
    # Bracket comments, #[[ ... ]] or #[=[ ... ]=], may span lines.
    text = re.sub(r"#\[(=*)\[.*?\]\1\]", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    code = []  # the text without comments, line ends kept
    in_quote = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "#" and not in_quote:
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            in_quote = not in_quote
        code.append(c)
        i += 1
    code = "".join(code)

    commands = []
    for match in re.finditer(r"(?m)^\s*([A-Za-z_]\w*)\s*\(", code):
        depth, in_quote, j = 1, False, match.end()
        while j < len(code) and depth:
            if code[j] == '"' and code[j - 1] != "\\":
                in_quote = not in_quote
            elif not in_quote:
                depth += {"(": 1, ")": -1}.get(code[j], 0)
            j += 1
        args = CMAKE_TOKEN.findall(code[match.end():j - 1])
        commands.append((match.group(1).lower(), args, code.count("\n", 0, match.start(1)) + 1))
    return commands


def declared_options(root):
    """TCN_* cache variables of the top-level CMakeLists.txt -> their line:
    option(TCN_X ...) (or cmake_dependent_option) and
    set(TCN_X value CACHE TYPE ...) but not INTERNAL."""
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
        text = f.read()
    options = {}
    for name, args, line in cmake_commands(text):
        if not args or not OPTION_NAME.fullmatch(args[0]):
            continue
        if name in ("option", "cmake_dependent_option"):
            options.setdefault(args[0], line)
        elif name == "set" and "CACHE" in args:
            kind = args[args.index("CACHE") + 1] if args.index("CACHE") + 1 < len(args) else ""
            if kind != "INTERNAL":
                options.setdefault(args[0], line)
    return options


def check_cmake_options(root, docs):
    """A -DTCN_X in a doc must be a declared option; every declared option
    must appear in README.md. Other TCN_ names are not reported: environment
    variables (TCN_EMU_ORDER) and variables CMake sets itself (TCN_WITH_CUDA)
    share the prefix, and a doc may name them in backticks."""
    options = declared_options(root)
    problems = []
    for doc in docs:
        for number, line in enumerate(doc.lines, 1):
            for name in DEFINE.findall(line):
                if name not in options:
                    problems.append(Problem(doc.rel, number, "cmake",
                                            f"-D{name}: CMakeLists.txt declares no option {name}"))
    readme = next((doc for doc in docs if doc.rel == "README.md"), None)
    in_readme = set(OPTION_NAME.findall("\n".join(readme.lines))) if readme else set()
    for name, line in sorted(options.items(), key=lambda item: item[1]):
        if name not in in_readme:
            problems.append(Problem("CMakeLists.txt", line, "cmake",
                                    f"option {name} is not mentioned in README.md"))
    return problems


# ---------------------------------------------------------------------------
# 5. The README's figures, each found where its row says it lives
# ---------------------------------------------------------------------------

FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+(?:e-?\d+)?|\d+e-?\d+|\d{3,})(?![\w])")
MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def check_readme_figures(root, docs):
    """Rows of the table under README.md's '## Results' heading: | what | result | date | details |.
    Each figure of the result cell must occur in one of the docs the row's cells link to."""
    readme = next((doc for doc in docs if doc.rel == "README.md"), None)
    if readme is None:
        return []
    problems, in_results = [], False
    for number, line in enumerate(readme.lines, 1):
        if line.startswith("## "):
            in_results = line.strip() == "## Results"
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not in_results or len(cells) < 4 or set(cells[1]) <= set("-: "):
            continue
        targets = []
        for rel in MD_LINK.findall(line):
            path = os.path.normpath(os.path.join(root, rel))
            if os.path.isdir(path):
                path = os.path.join(path, "README.md")
            if path.endswith(".md") and os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    targets.append(f.read())
        if not targets:
            continue  # no doc to hold the figures (the links check reports a broken one)
        for figure in FIGURE.findall(cells[1]):
            pattern = re.compile(r"(?<![\w.])" + re.escape(figure) + r"(?![\d])")
            if not any(pattern.search(text) for text in targets):
                problems.append(Problem(readme.rel, number, "figure",
                                        f"{figure} ({cells[0]}) is in none of the docs this row links to"))
    return problems


# ---------------------------------------------------------------------------
# Running the checks
# ---------------------------------------------------------------------------

def run_checks(root, check_programs=True):
    docs = [Doc.read(root, rel) for rel in find_docs(root)]
    problems = check_links(root, docs) + check_paths(root, docs)
    if check_programs:
        problems += check_flags(root, docs)
    problems += check_cmake_options(root, docs)
    problems += check_readme_figures(root, docs)
    return docs, problems


def self_test():
    """Builds a small repository with one problem of each kind planted beside
    correct uses of the same syntax, and checks that exactly the planted ones
    are reported. Returns the process's exit status."""
    with tempfile.TemporaryDirectory(prefix="check_docs_") as root:
        def write(rel, text, executable=False):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            if executable:
                os.chmod(path, 0o755)

        def fake_program(rel, options, subcommands=None):
            """A shell script that prints a CLI11-style --help."""
            def help_text(opts):
                return "Usage: prog [OPTIONS]\n\nOptions:\n  -h,--help   Print this help message and exit\n" + \
                    "".join(f"  {o} INT=1   an option\n" for o in opts)
            script = "#!/bin/sh\n"
            if subcommands:
                top = help_text(options) + "\nSubcommands:\n" + "".join(f"  {s}   a subcommand\n"
                                                                       for s in subcommands)
                script += 'case "$1" in\n'
                for sub, opts in subcommands.items():
                    script += f"  {sub}) cat <<'EOF'\n{help_text(opts)}EOF\n  ;;\n"
                script += f"  *) cat <<'EOF'\n{top}EOF\n  ;;\nesac\n"
            else:
                script += f"cat <<'EOF'\n{help_text(options)}EOF\n"
            write(rel, script, executable=True)

        write("CMakeLists.txt", "\n".join([
            "cmake_minimum_required(VERSION 3.25)",
            "# option(TCN_COMMENTED \"not an option: a comment\" ON)",
            "#[[ option(TCN_BRACKETED \"not an option: a bracket comment\" ON)",
            "]]",
            'option(TCN_ALPHA "the first option" ON)',
            'set(TCN_BETA AUTO CACHE STRING "the second (with parentheses) option")',
            'set(TCN_HIDDEN ON CACHE INTERNAL "internal: not an option")',
            "set(TCN_PLAIN ON)",
            'option(TCN_UNLISTED "PLANTED: README.md does not mention it" OFF)',
            ""]))
        write("core/tensor.h", "// a source file\n")
        write("docs/tutorial/notes.txt", "a file beside the tutorial\n")
        write("tools/run.sh", "#!/bin/sh\n", executable=True)
        fake_program("build/charlm", [], {"train": ["--lr", "--log-interval,--log_interval"],
                                          "eval": ["--checkpoint"]})
        fake_program("build/examples/tasks/adding", ["--seq_len"])
        write("README.md", """# Project — a test

## Build

Options: `TCN_ALPHA`, and `TCN_BETA` as in `cmake -DTCN_BETA=ON`; `TCN_SOURCE_DIR` is an
environment variable. Build with -DTCN_NOPE=1 (PLANTED-CMAKE).

## Build

See [the guide](docs/guide.md), [its usage](docs/guide.md#usage-tcn_alphaon) and
[the second Build](#build-1), [the first](#build), [a folder](docs/tutorial/),
[the web](https://example.com/missing.md), ![an image](core/tensor.h "title"),
`[not a link](nowhere.md)`, [a bad one](docs/missing.md) (PLANTED-LINK-FILE).

```bash
build/charlm train --lr 1 --log-interval 10   # a comment: --not-a-flag
mpirun -np 2 build/charlm train --lr 1 \\
    --log_interval 5
tools/check.py --charlm build/charlm --steps 3 && build/examples/tasks/adding --seq_len 9
[ignored](in/a/fence.md) `core/missing_in_fence.h`
```

## Results

| what | result | date | details |
|---|---|---|---|
| speed | 0.56x the other's step (1026 ms), 20 steps | 2026-12-07 | [guide](docs/guide.md) |
| loss | 3.117 bpc (PLANTED-FIGURE) | 2026-12-07 | [guide](docs/guide.md) |
""")
        write("docs/guide.md", """# Guide

## Usage: `TCN_ALPHA=ON`

Paths: `core/tensor.h:12`, `core/tensor.h(Tensor)`, `tools/run.sh --fast`, `core/`,
`cuda/*.cu`, `core/<name>.h`, `nn/models.{h,cpp}`, `build/charlm`, `runs/x.csv`,
`README.md`, `tutorial/notes.txt` (not a path: no source folder), `core/gone.h`
(PLANTED-PATH).

Links: [back](../README.md#project--a-test), [bad anchor](../README.md#nothing)
(PLANTED-LINK-ANCHOR), [here](#guide), [bad here](#nope) (PLANTED-LINK-SELF).

Figures: the step takes 1026 ms, 0.56x the other's.

Flags: `charlm --checkpoint x` (any subcommand), `build/charlm train --lr 2
--nope` (PLANTED-FLAG),
`build/wordlm train --x` (PLANTED-MISSING: said once), `wordlm --y`.
""")
        docs, problems = run_checks(root)

        def line_of(rel, marker):
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if marker in line:
                        return number
            raise AssertionError(f"{marker} not in {rel}")

        expected = {
            ("README.md", line_of("README.md", "PLANTED-LINK-FILE"), "link"),
            ("docs/guide.md", line_of("docs/guide.md", "#nothing"), "link"),
            ("docs/guide.md", line_of("docs/guide.md", "#nope"), "link"),
            ("docs/guide.md", line_of("docs/guide.md", "`core/gone.h`"), "path"),
            ("docs/guide.md", line_of("docs/guide.md", "--nope"), "flag"),
            ("docs/guide.md", line_of("docs/guide.md", "build/wordlm train"), "flag"),
            ("README.md", line_of("README.md", "PLANTED-CMAKE"), "cmake"),
            ("CMakeLists.txt", line_of("CMakeLists.txt", "TCN_UNLISTED"), "cmake"),
            ("README.md", line_of("README.md", "PLANTED-FIGURE"), "figure"),
        }
        found = [(p.file, p.line, p.check) for p in problems]
        # Without the programs, the same minus the flag check's problems.
        _, without_programs = run_checks(root, check_programs=False)
        found_without = [(p.file, p.line, p.check) for p in without_programs]
        for problem in problems:
            print(f"  found: {problem}")
        ok = sorted(found) == sorted(expected)
        if sorted(found_without) != sorted(e for e in expected if e[2] != "flag"):
            print(f"  WRONG without the programs: {sorted(found_without)}")
            ok = False
        if not ok:
            for item in sorted(set(expected) - set(found)):
                print(f"  MISSED: {item}")
            for item in sorted(set(found) - set(expected)):
                print(f"  UNEXPECTED: {item}")
            if len(found) != len(set(found)):
                print("  DUPLICATES in the problems found")
        print(f"check_docs self-test: {'passed' if ok else 'FAILED'} "
              f"({len(found)} problems found, {len(expected)} planted, in {len(docs)} docs)")
        return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the repository (default: the one this script is in)")
    parser.add_argument("--no-programs", action="store_true",
                        help="do not run the programs in build/: skip the flag check")
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker on a small repository with planted problems")
    args = parser.parse_args()
    if args.self_test:
        return self_test()

    started = time.monotonic()
    root = os.path.abspath(args.root)
    if not os.path.isfile(os.path.join(root, "CMakeLists.txt")):
        print(f"check_docs: {root} is not the repository (no CMakeLists.txt)", file=sys.stderr)
        return 2
    docs, problems = run_checks(root, check_programs=not args.no_programs)
    for problem in problems:
        print(problem)
    print(f"check_docs: {len(problems)} problem(s) in {len(docs)} docs, "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
