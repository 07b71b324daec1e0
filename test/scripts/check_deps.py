#!/usr/bin/python3
"""Every command a script of the project calls, and every module it imports,
must be known to test/scripts/deps.txt (which ensure_deps.sh installs from),
so that a new tool cannot slip into the scripts without make test installing
it.  Prints TAP: one line per script, and the names it does not know.

Shell scripts are read through bash's own parser (bash --pretty-print) and
every simple command's first word is looked up: builtins, keywords, the
script's own functions, variables and paths inside the project are not
commands to install; wrappers (sudo, timeout, runuser, exec, xargs, env)
pass the look-up on to the command they run; command substitutions, trap
handlers and `bash -c` strings are read as command lines too.  Python
scripts are read as syntax trees: imports that are neither the standard
library nor the project's own modules, and the programs run through
subprocess.

    check_deps.py [--list]    --list: print every command and module found
"""
import ast
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TABLE = os.path.join(ROOT, "test", "scripts", "deps.txt")

# Commands that run the command named after their options.
WRAPPERS = {"sudo", "timeout", "runuser", "exec", "xargs", "env", "nice", "setsid", "nohup",
            "command", "builtin", "time", "stdbuf"}


def known_names():
    """(commands, modules) named in deps.txt."""
    commands, modules = set(), set()
    with open(TABLE) as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            kind, name = fields[0], fields[1]
            if kind == "cmd":
                commands.add(name)
            elif kind in ("py", "pypi"):
                modules.add(name)
    return commands, modules


def bash_words(kind):
    out = subprocess.run(["bash", "-c", f"compgen -{kind}"], capture_output=True, text=True)
    return set(out.stdout.split())


BUILTINS = bash_words("b") | bash_words("k") | {"[[", "]]", "((", "))", "[", "]", "{", "}", "!"}


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.split()
    files = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        files += [os.path.relpath(os.path.join(top, n), ROOT) for n in names]
    return files


def is_shell(path):
    if path.endswith(".sh"):
        return True
    try:
        with open(os.path.join(ROOT, path), "rb") as f:
            first = f.readline()
    except OSError:
        return False
    return first.startswith(b"#!") and re.search(rb"\b(ba)?sh\b", first) is not None


def substitutions(line):
    """The contents of every $(...) and `...` in a line (outermost first),
    and the line with each replaced by a placeholder word."""
    found, out, i = [], [], 0
    while i < len(line):
        if line.startswith("$((", i):  # arithmetic, not a command
            depth, j = 0, i + 1
            while j < len(line):
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                j += 1
                if depth == 0:
                    break
            out.append("0")
            i = j
        elif line.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(line) and depth:
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                j += 1
            found.append(line[i + 2:j - 1])
            out.append("SUBST")
            i = j
        elif line[i] == "`":
            j = line.find("`", i + 1)
            j = len(line) if j < 0 else j
            found.append(line[i + 1:j])
            out.append("SUBST")
            i = j + 1
        else:
            out.append(line[i])
            i += 1
    return found, "".join(out)


def command_words(line, functions):
    """The first word of every simple command of one line of shell."""
    inner, line = substitutions(line)
    words = []
    for text in inner:
        words += command_words(text, functions)
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return words
    segment = []
    for tok in tokens + [";"]:
        if tok and set(tok) <= set(";&|()"):
            words += segment_command(segment, functions)
            segment = []
        else:
            segment.append(tok)
    return words


def segment_command(tokens, functions):
    """The command a simple command runs, passing wrappers through."""
    words, i = [], 0
    while i < len(tokens):
        tok = tokens[i]
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=", tok):  # VAR=value
            i += 1
            continue
        if tok in ("<", ">", ">>", "<<", "<<<", ">&", "<&", "&>") or re.match(r"^\d*[<>]", tok):
            i += 2 if tok in ("<", ">", ">>", "<<<", "&>") else 1
            continue
        break
    if i >= len(tokens):
        return words
    word = tokens[i]
    if word in ("trap", "eval") and i + 1 < len(tokens):
        for text in tokens[i + 1:i + 2]:
            words += command_words(text, functions)
        return words
    if word in ("bash", "sh") and "-c" in tokens[i + 1:]:
        j = tokens.index("-c", i + 1)
        if j + 1 < len(tokens):
            words += command_words(tokens[j + 1], functions)
        return words + [word]
    if word in BUILTINS or word in functions:
        if word in ("command", "builtin", "exec", "time"):
            pass  # fall through to the wrapper handling below
        else:
            return words
    if word in WRAPPERS:
        if word not in BUILTINS:
            words.append(word)
        if word == "command" and i + 1 < len(tokens) and tokens[i + 1] in ("-v", "-V"):
            return words  # a question, not a call
        rest = tokens[i + 1:]
        # skip the wrapper's options and their values, then the command
        while rest and (rest[0].startswith("-") or re.match(r"^[0-9.]+[smhd]?$", rest[0])
                        or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", rest[0])):
            opt = rest.pop(0)
            if word in ("runuser", "sudo") and opt in ("-u", "-g") and rest:
                rest.pop(0)
            if opt == "--":
                break
        return words + segment_command(rest, functions)
    if "$" in word or word in ("", "SUBST", "0"):
        return words  # a command held in a variable: not ours to look up
    if "/" in word:
        if word.startswith("/"):
            return words + [os.path.basename(word)]
        return words  # a path inside the project
    return words + [word]


def shell_commands(path):
    """Every command a shell script calls."""
    out = subprocess.run(["bash", "--pretty-print", os.path.join(ROOT, path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SyntaxError(out.stderr.strip())
    text = out.stdout
    functions = set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_-]*) \(\) *$", text, re.M))
    words, heredoc, in_case = [], None, 0
    for line in text.splitlines():
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?", line)
        if m and "<<<" not in line:
            heredoc = m.group(1)
        stripped = line.strip()
        if re.match(r"^case\b", stripped):
            in_case += 1
            continue
        if stripped == "esac" or stripped.startswith("esac"):
            in_case = max(0, in_case - 1)
            continue
        if in_case and re.match(r"^[^()\s]*[^()]*\)", stripped) and not stripped.startswith("("):
            stripped = stripped[stripped.index(")") + 1:]  # a case pattern
        words += command_words(stripped, functions)
    return words


def local_modules():
    names = set()
    for path in tracked_files():
        if path.endswith(".py"):
            names.add(os.path.splitext(os.path.basename(path))[0])
    return names


def python_needs(path, local):
    """(commands, modules) a Python script needs."""
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read(), path)
    commands, modules = [], []
    stdlib = set(sys.stdlib_module_names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module and node.level == 0 else []
        else:
            names = []
        for name in names:
            top = name.split(".")[0]
            if top not in stdlib and top not in local and top != "__future__":
                modules.append(top)
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
            if owner == "subprocess" and name in ("run", "call", "check_call", "check_output", "Popen") \
                    and node.args:
                first = node.args[0]
                if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                    head = first.elts[0]
                    consts = [c.value for c in ast.walk(head)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                    if consts:
                        commands.append(os.path.basename(consts[-1]))
                elif isinstance(first, ast.Constant) and isinstance(first.value, str):
                    commands += command_words(first.value, set())
            if owner == "os" and name == "system" and node.args and isinstance(node.args[0], ast.Constant):
                commands += command_words(node.args[0].value, set())
    return commands, modules


def main():
    listing = "--list" in sys.argv
    known_cmds, known_mods = known_names()
    local = local_modules()
    n, bad = 0, 0
    for path in sorted(tracked_files()):
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            continue
        if path.endswith(".py"):
            try:
                commands, modules = python_needs(path, local)
            except SyntaxError as e:
                commands, modules = [f"(cannot parse: {e})"], []
        elif is_shell(path):
            try:
                commands, modules = shell_commands(path), []
            except SyntaxError as e:
                commands, modules = [f"(cannot parse: {e})"], []
        else:
            continue
        unknown = sorted({c for c in commands if c not in known_cmds} |
                         {m for m in modules if m not in known_mods})
        n += 1
        if listing:
            print(f"# {path}: commands {sorted(set(commands))}, modules {sorted(set(modules))}")
        if unknown:
            bad += 1
            print(f"not ok {n} - {path} calls what test/scripts/deps.txt does not know")
            print(f"# unknown: {', '.join(unknown)}")
        else:
            print(f"ok {n} - {path}: every command and module it needs is in deps.txt")
    print(f"1..{n}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
