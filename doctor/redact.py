"""Redaction: one separate pass over a report (or a facts snapshot) before anything is written.

Always on: values of variables and keys whose names look secret (``*KEY*``,
``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``, ``*CREDENTIAL*``, ...) and strings that
look like credentials wherever they appear (AWS access key IDs and session
tokens, bearer tokens, passwords in URLs, ``NAME=secret`` assignments, private
keys, common API token formats). A command line is redacted as the one line it is
(:meth:`Redactor.command`: an option's value is often the next argument), and a
file as a whole (:meth:`Redactor.file`: a key block spans lines; JSON and TOML are
parsed, so a secret-named key is found wherever it is nested).

With ``extended=True`` (``--redact``): host names, IPv4/IPv6 and MAC addresses,
user names and the user part of home paths are replaced by consistent
placeholders (``[HOST-1]``, ``[IP-2]``...), so a support engineer can still
see that two mentions are the same thing.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Pattern, Tuple

MASK = "[REDACTED]"


try:
    import tomllib  # type: ignore[import-not-found]
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]


def _load_rules() -> Dict[str, Any]:
    from importlib import resources

    text = resources.files("dl_doctor").joinpath("data/secrets.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


RULES = _load_rules()
_SECRET_WORDS = tuple(RULES["names"]["words"])
_SECRET_PARTS = set(RULES["names"]["parts"])
_SECRET_SUFFIXES = tuple(RULES["names"]["suffixes"])
_NOT_SECRET = set(RULES["names"]["not_secret"])
_SECRET_QUERY = {q.lower() for q in RULES["urls"]["query"]}
_FLAG_NOT_SECRET = set(RULES["commands"]["flag_not_secret"])
_USER_SCHEMES = set(RULES["urls"]["user_schemes"])
MAX_NAME = 128


_NON_ALNUM = re.compile(r"[^A-Z0-9]+")


def looks_secret_name(name: str) -> bool:
    """True for variable/key names whose values are secrets (AWS_SECRET_ACCESS_KEY, HF_TOKEN, DB_PASS, SENTRY_DSN...)."""
    return _looks_secret(name[:MAX_NAME].upper())


@functools.lru_cache(maxsize=8192)  # a report asks about the same few hundred key names thousands of times
def _looks_secret(upper: str) -> bool:
    if upper in _NOT_SECRET:
        return False
    squashed = _NON_ALNUM.sub("", upper)
    if any(word in squashed for word in _SECRET_WORDS):
        return True
    parts = [p for p in _NON_ALNUM.split(upper) if p]
    return any(p in _SECRET_PARTS for p in parts) or (len(parts) > 0 and parts[-1].endswith(_SECRET_SUFFIXES))


# Values that cannot be secrets even under a secret-looking name
# (TOKENIZERS_PARALLELISM=false, max_tokens=4096): kept, because they help support.
_TRIVIAL = re.compile(r"^(?:\d{1,4}|true|false|yes|no|none|null|on|off)$", re.I)

# Every quantifier below is bounded, so each attempt scans a bounded window and a whole pass stays linear in the
# input (tests/e2e/test_hostile.py runs every pattern on 1 MiB of adversarial text).
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,127}"


def _mask_span(m: "re.Match[str]", group: str) -> str:
    """The match with only ``group`` replaced by the mask."""
    start, end = m.span(group)
    base = m.start()
    text = m.group(0)
    return text[: start - base] + MASK + text[end - base:]


def _secret_assignment(m: "re.Match[str]") -> str:
    group = next(g for g in ("dq", "sq", "bare") if m.group(g) is not None)
    value = m.group(group)
    if looks_secret_name(m.group("name")) and value and value != MASK and not _TRIVIAL.match(value):
        return _mask_span(m, group)
    return m.group(0)


def _query(m: "re.Match[str]") -> str:
    name, value = m.group(2), m.group(3)
    if value and value != MASK and (name.lower() in _SECRET_QUERY or looks_secret_name(name)) \
            and not _TRIVIAL.match(value):
        return f"{m.group(1)}{name}={MASK}"
    return m.group(0)


_TOKENISH = re.compile(r"^(?=.{0,256}[0-9])[A-Za-z0-9_-]{12,256}$|^[A-Za-z0-9_-]{24,256}$")


def _url_user(m: "re.Match[str]") -> str:
    """``https://USER@host/``: the user part alone is how a registry mirror, a git remote or a package index carries
    a token, whatever its length, so it is masked; only where a user name is the norm (``ssh://git@host``) is a
    user name that does not look like a token kept."""
    scheme, user = m.group(1)[:-3].lower(), m.group(2)
    if scheme in _USER_SCHEMES and not _TOKENISH.match(user):
        return m.group(0)
    return f"{m.group(1)}{MASK}@"


def _masked_group(m: "re.Match[str]") -> str:
    return _mask_span(m, "secret")


# the option's name up to the keyword: `--hf-`, `--NotebookApp.`, `--IdentityProvider.hashed_`
_FLAG_HEAD = re.compile(r"[A-Za-z0-9._-]{0,64}$")
_FLAG_PARTS = re.compile(r"[-_.]")
_QUOTED_EMPTY = ("''", '""')


def _flag(m: "re.Match[str]") -> str:
    """The keyword must sit in a command-line option: ``-``/``--`` then letters, digits, dots, underscores and dashes
    up to it. Kept: an option that names where the secret is rather than the secret (``--password-stdin``,
    ``--token-file``), an empty value (``--NotebookApp.token ''``: the notebook check needs to see it), and, after a
    blank, the next option rather than a value."""
    before = m.string[max(0, m.start() - 64):m.start()]
    head = _FLAG_HEAD.search(before)
    word = head.group(0) if head else ""
    if not word.startswith("-"):
        return m.group(0)
    if len(word) == 64 and m.start() > 64 and m.string[m.start() - 65] not in " \t\n\"'=":
        return m.group(0)
    sep, value = m.group(1), m.group(2)
    name = m.group(0)[: m.start(1) - m.start()].lower()
    if _FLAG_NOT_SECRET.intersection(_FLAG_PARTS.split(name)) or _TRIVIAL.match(value) or value in _QUOTED_EMPTY:
        return m.group(0)
    if sep != "=" and value.startswith("-"):
        return m.group(0)
    if value[0] in "'\"" and len(value) > 1 and value[-1] == value[0]:
        return m.group(0)[: m.start(2) - m.start()] + value[0] + MASK + value[0]
    return m.group(0)[: m.start(2) - m.start()] + MASK


# (pattern, replacement) applied to every string, in order. Private keys are handled first, by hand (mask_private_keys).
# Self-identifying token formats: found by their own shape, whatever surrounds them.
_TOKENS: List[Tuple[Pattern[str], Any]] = [
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
     MASK),
    (re.compile(r"(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE|FQoGZXIvYXdzE)[A-Za-z0-9/+=]{16,4096}"), MASK),
    (re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255}"
                r"|gl(?:pat|dt|rt|ptt|cbt|imt|soat|oas|ffct|agent)-[A-Za-z0-9_-]{20,255}"
                r"|(?:xox[abposr]|xapp)-[A-Za-z0-9-]{10,255}|hf_[A-Za-z0-9]{30,255}"
                r"|sk-[A-Za-z0-9_-]{20,255}|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36}"
                r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,255}|hv[sbr]\.[A-Za-z0-9_-]{24,512})"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,4096}\.[A-Za-z0-9_-]{8,4096}\.[A-Za-z0-9_-]{8,4096}"), MASK),
]
_BEARER = (re.compile(r"(?i)\b(bearer|basic|token)([ \t]{1,16})[A-Za-z0-9\-._~+/]{8,4096}={0,3}"),
           lambda m: f"{m.group(1)}{m.group(2)}{MASK}")
# URL shapes with a token in the path (data: secrets.toml [[urls.path]])
_URL_PATHS = [(re.compile(rule["pattern"]), _masked_group) for rule in RULES["urls"]["path"]]
# Forms that need a separator (=, :, @, ?, &, ; or whitespace) around the secret.
_SEPARATED: List[Tuple[Pattern[str], Any]] = [
    # user:password@ and TOKEN@ in URLs
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)([^/\s:@]{0,256}):([^/\s@]{1,512})@"),
     lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)([^/?#\s:@\[\"'<>,{}\\|^`]{1,256})@"), _url_user),
    # ?token=... &password=... ;sig=... in URLs (before the assignments, which would read `https:` as a name)
    (re.compile(r"([?&;])([A-Za-z0-9_.\[\]-]{1,64})=([^&#\s\"'<>]{0,2048})"), _query),
    # command lines (data: secrets.toml [[commands.flag]])
    *[(re.compile(rule["pattern"]), _masked_group) for rule in RULES["commands"]["flag"]],
    # --password=..., --hf-token ...: found by the keyword (a literal, cheap to scan for), then checked to be a flag
    (re.compile(r"(?i)(?:password|passwd|passphrase|token|secret|api-key|apikey)[a-z0-9_-]{0,64}"
                r"(=|[ \t]{1,8})(?!\[REDACTED\])('[^'\n]{0,1024}'|\"[^\"\n]{0,1024}\"|\S{1,4096})"), _flag),
    # "client_secret": "...", 'password': '...' (JSON, Python and YAML mappings written into text)
    (re.compile(r"(?P<kq>[\"'])(?P<name>" + _NAME + r")(?P=kq)(?P<sep>[ \t]{0,8}[:=][ \t]{0,8})"
                r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.){0,1024})\"|'(?P<sq>[^'\n]{0,1024})'"
                r"|(?P<bare>[^\s\"',;&\[\]{}]{1,4096}))"), _secret_assignment),
    # NAME=value, NAME: value, NAME = "a quoted value with spaces" (not `scheme://`)
    (re.compile(r"(?<![A-Za-z0-9_.-])(?P<name>" + _NAME + r")(?P<sep>[ \t]{0,8}(?:=|:(?!//))[ \t]{0,8})"
                r"(?:\"(?P<dq>[^\"\n]{0,1024})\"|'(?P<sq>[^'\n]{0,1024})'|(?P<bare>[^\s\"',;&]{1,4096}))"),
     _secret_assignment),
]
_ALWAYS = _TOKENS + [_BEARER] + _URL_PATHS + _SEPARATED
_SEPARATORS = re.compile(r"[=:@?&;\s]")
# What a string without any separator can still hold: token formats and token-bearing URL paths written without a
# scheme (webhooks, conda /t/<token>/).
_SELF_IDENTIFYING = _TOKENS + _URL_PATHS


_PRIVATE_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PRIVATE_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")


def mask_private_keys(text: str) -> str:
    """Every PEM or PGP private key block, from its BEGIN line to its END line (or to the end of the text), whether
    its lines are separate, joined by escaped newlines (``\\n`` in JSON) or inside one variable's value."""
    if "PRIVATE KEY" not in text:
        return text
    out: List[str] = []
    pos = 0
    while True:
        m = _PRIVATE_BEGIN.search(text, pos)
        if not m:
            break
        out.append(text[pos:m.start()])
        out.append("-----BEGIN PRIVATE KEY----- " + MASK)
        end = _PRIVATE_END.search(text, m.end())
        pos = end.end() if end else len(text)
    out.append(text[pos:])
    return "".join(out)


# -- whole files ----------------------------------------------------------------------------------------------------

# Keys whose value is an argument list (the security probe's servers, a bundle's commands, a kernel spec).
_COMMAND_KEYS = {"argv", "cmdline", "command", "args"}
MAX_ARGS = 4096
MAX_IN_PLACE_WORK = 1 << 25  # characters scanned to mask a structured file's secrets where they are written
_KEYED_SUFFIXES = (".ini", ".cfg", ".conf", ".cnf", ".yaml", ".yml", ".env", ".properties")


def _parse_toml(text: str) -> Any:
    return tomllib.loads(text)


_PARSERS: Dict[str, Callable[[str], Any]] = {"json": json.loads, "toml": _parse_toml}


def _config_kind(path: str, text: str) -> Optional[str]:
    """How a file is structured, from its name (and, for JSON without the suffix, its first character)."""
    name = path.lower()
    if name.endswith(".toml"):
        return "toml"
    if name.endswith(_KEYED_SUFFIXES):
        return "keyed"
    if name.endswith((".json", ".ipynb")) or text.lstrip()[:1] == "{":
        return "json"
    return None


def _secret_strings(doc: Any) -> set:
    """Every non-trivial string held under a secret-named key (directly or in a list), at any depth. Walked with a
    stack, not recursion: a parsed file can nest as deep as its parser allowed."""
    found = set()
    stack: List[Tuple[Any, Optional[str]]] = [(doc, None)]
    while stack:
        obj, key = stack.pop()
        if isinstance(obj, dict):
            stack.extend((v, k if isinstance(k, str) else None) for k, v in obj.items())
        elif isinstance(obj, list):
            stack.extend((v, key) for v in obj)
        elif isinstance(obj, str) and key is not None and obj and obj != MASK and not _TRIVIAL.match(obj) \
                and looks_secret_name(key):
            found.add(obj)
    return found


def _written_forms(kind: str, value: str) -> List[str]:
    """How a string can be written in a JSON or TOML file, quotes included (masking the quoted form touches
    nothing else of the file)."""
    escaped = {json.dumps(value), json.dumps(value, ensure_ascii=False)}
    forms = set(escaped)
    if kind == "json":
        forms |= {e.replace("/", "\\/") for e in escaped}
    else:
        forms |= {"'" + value + "'", "'''" + value + "'''", "'''\n" + value + "'''",
                  '"""' + value + '"""', '"""\n' + value + '"""'}
    return sorted(forms, key=len, reverse=True)


# `key = value`, `key: value`, `"key": value`, `- key: value` at the start of a line (INI, YAML, .env)
_KEY_LINE = re.compile(r"(?m)^(?P<lead>[ \t]{0,64}(?:-[ \t]{1,8})?(?:export[ \t]{1,8})?)(?P<kq>[\"']?)"
                       r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,127})(?P=kq)(?P<sep>[ \t]{0,8}[:=][ \t]{0,8})"
                       r"(?P<value>[^\s][^\r\n]{0,4095})")


def _key_line(m: "re.Match[str]") -> str:
    """The rest of the line after a secret-named key, masked (in the value's own quotes, so TOML stays TOML)."""
    value = m.group("value").rstrip()
    bare = value.strip("\"'")
    if looks_secret_name(m.group("name")) and bare and bare != MASK and not _TRIVIAL.match(bare):
        quote = value[0] if value[0] in "\"'" else ""
        return m.group(0)[: m.start("value") - m.start()] + quote + MASK + quote
    return m.group(0)


_BLOCK_SCALAR = re.compile(r"[|>][-+0-9]{0,3}[ \t]{0,64}(?:#[^\r\n]{0,4096})?")


def _mask_block_scalars(text: str) -> str:
    """YAML's ``key: |`` (or ``>``): the secret is on the lines below, more indented than the key; they are masked
    whole (one pass over the lines, so linear)."""
    lines = text.split("\n")
    block_indent: Optional[int] = None
    for n, line in enumerate(lines):
        stripped = line.lstrip(" \t")
        indent = len(line) - len(stripped)
        if block_indent is not None:
            if not stripped.strip() or indent > block_indent:
                if stripped.strip():
                    lines[n] = line[:indent] + MASK
                continue
            block_indent = None
        m = _KEY_LINE.match(line)
        if m and looks_secret_name(m.group("name")) and _BLOCK_SCALAR.fullmatch(m.group("value").rstrip()):
            block_indent = indent
    return "\n".join(lines)


_MAC = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}(?![0-9A-Fa-f:])")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_EC2_HOST = re.compile(r"\bip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.[A-Za-z0-9.-]{1,253})?")
_HOME = re.compile(r"(/home/|/Users/)([A-Za-z0-9._-]{1,64})")
_SYSTEM_USERS = {"root", "nobody", "daemon", "bin", "sys", "admin", "user", "ubuntu", "ec2-user", "centos", "cloud-user"}


class Redactor:
    def __init__(self, extended: bool = False, hostnames: Iterable[str] = (), usernames: Iterable[str] = (),
                 secret_values: Iterable[str] = (), versions: Iterable[str] = ()):
        self.extended = extended
        # Four-part versions the facts name as versions (cuDNN 9.1.0.70, cuBLAS 12.4.5.8) look like IPv4 addresses:
        # those exact strings are left as they are wherever they appear.
        self._versions = {v for v in versions if isinstance(v, str) and _IPV4.fullmatch(v)}
        # Values of secret-named variables, masked wherever they turn up verbatim (a command that prints a
        # token without its name, a config file that repeats it); short or trivial ones would mask noise.
        self._secret_values = sorted({v for v in secret_values
                                      if isinstance(v, str) and len(v) >= 8 and not _TRIVIAL.match(v)
                                      and v != MASK}, key=len, reverse=True)
        self.count = 0
        self._memo: Dict[str, str] = {}
        self._maps: Dict[str, Dict[str, str]] = {}
        self._hostnames = sorted({h for h in hostnames if h and h not in ("localhost",)}, key=len, reverse=True)
        names = set()
        for u in usernames:
            if u and u not in _SYSTEM_USERS and re.match(r"^[A-Za-z0-9._-]{2,}$", u):
                names.add(u)
        self._usernames = sorted(names, key=len, reverse=True)

    # -- placeholders ---------------------------------------------------------

    def _placeholder(self, kind: str, value: str) -> str:
        table = self._maps.setdefault(kind, {})
        if value not in table:
            table[value] = f"[{kind}-{len(table) + 1}]"
        self.count += 1
        return table[value]

    # -- strings ----------------------------------------------------------------

    def text(self, value: str) -> str:
        """``value`` with every secret masked (and, extended, names replaced). A report repeats many strings
        (paths, versions): each distinct one is redacted once."""
        hit = self._memo.get(value)
        if hit is not None:
            if hit != value:
                self.count += 1
            return hit
        out = self._text(value)
        if len(self._memo) < 100000:
            self._memo[value] = out
        return out

    def _text(self, value: str) -> str:
        out = value
        for secret in self._secret_values:
            if secret in out:
                out = out.replace(secret, MASK)
        out = mask_private_keys(out)
        # Most strings of a report are paths, names and versions: a string without '=', ':', '@', '?', '&', ';'
        # or whitespace cannot hold an assignment, a URL's user or query, a flag or an authorisation, so only the
        # self-identifying token formats and token-bearing paths are looked for (a quarter of the patterns).
        patterns = _ALWAYS if _SEPARATORS.search(out) else _SELF_IDENTIFYING
        for pattern, repl in patterns:
            out = pattern.sub(repl, out)
        if self.extended:
            out = self._extended(out)
        if out != value:
            self.count += 1
        return out

    def _extended(self, s: str) -> str:
        for host in self._hostnames:
            if host in s:
                s = re.sub(r"(?<![\w-])" + re.escape(host) + r"(?![\w-])", lambda m: self._placeholder("HOST", m.group(0)), s)
        s = _EC2_HOST.sub(lambda m: self._placeholder("HOST", m.group(0)), s)
        s = _MAC.sub(lambda m: self._placeholder("MAC", m.group(0).lower()), s)
        s = _IPV4.sub(self._ipv4, s)
        s = _IPV6.sub(self._ipv6, s)
        s = _HOME.sub(lambda m: m.group(1) + self._placeholder("USER", m.group(2)), s)
        for name in self._usernames:
            if name in s:
                # '_' separates too: tools put the user into directory names (/tmp/torchinductor_USER)
                s = re.sub(r"(?<![A-Za-z0-9-])" + re.escape(name) + r"(?![A-Za-z0-9-])",
                           lambda m: self._placeholder("USER", m.group(0)), s)
        return s

    def _ipv4(self, m: "re.Match[str]") -> str:
        text = m.group(0)
        if text in self._versions:
            return text
        try:
            addr = ipaddress.IPv4Address(text)
        except ValueError:
            return text
        if addr.is_loopback or addr.is_unspecified or text == "255.255.255.255":
            return text
        return self._placeholder("IP", text)

    def _ipv6(self, m: "re.Match[str]") -> str:
        text = m.group(0)
        try:
            addr = ipaddress.IPv6Address(text)
        except ValueError:
            return text
        if addr.is_loopback or addr.is_unspecified:
            return text
        return self._placeholder("IP", text)

    # -- command lines and files -----------------------------------------------------

    def command(self, argv: List[str]) -> List[str]:
        """An argument list redacted as the one command line it is: a secret option's value is often the next
        argument (``--NotebookApp.token VALUE``, ``docker login -p VALUE``, ``htpasswd -b FILE USER VALUE``), which
        no argument shows alone. The arguments are joined by tabs (a blank to every rule, and rarely inside an
        argument), so the masked line splits back into the same arguments; where a mask spans arguments (a key
        block) the masked line is kept as the one element."""
        line = "\t".join(argv)
        masked = self.text(line)
        if masked == line:
            return list(argv)
        parts = masked.split("\t")
        return parts if len(parts) == len(argv) else [masked.replace("\t", " ")]

    def file(self, path: str, text: str) -> str:
        """A whole file's text, redacted as one string, never line by line: a key block spans lines. JSON and TOML
        are parsed first, so the value of every secret-named key is masked wherever it is nested and however it
        is written; INI, YAML, .env and .properties files mask the rest of a line after a secret-named key."""
        kind = _config_kind(path, text)
        if kind in _PARSERS:
            text = self._structured(kind, text)
        elif kind == "keyed":
            text = _KEY_LINE.sub(_key_line, _mask_block_scalars(text))
        return self.text(text)

    def _structured(self, kind: str, text: str) -> str:
        """Each secret-named key's string value, masked where it is written (the file keeps its layout), and the
        result parsed again to prove it. Where a value cannot be found as written (an unusual escape), the rest of
        its key's line is masked; where that is not enough, the file is replaced by its parsed content, masked, as
        JSON: the layout is lost, the secret is not kept."""
        parse = _PARSERS[kind]
        try:
            doc = parse(text)
        except (ValueError, RecursionError, UnicodeError):
            return text  # not this format after all: the text rules apply
        secrets = _secret_strings(doc)
        if not secrets:
            return text
        out = text
        # each secret is looked for in the whole file: bounded, so a file of thousands of secrets is not quadratic
        # (it goes to the parsed, masked content below, which is linear)
        if len(secrets) * len(text) <= MAX_IN_PLACE_WORK:
            for secret in sorted(secrets, key=len, reverse=True):
                for form in _written_forms(kind, secret):
                    out = out.replace(form, form[0] + MASK + form[-1])
        # what is still there (a TOML escape such as \u0041) is usually on its key's line
        for attempt in (out, _KEY_LINE.sub(_key_line, out)):
            try:
                if not _secret_strings(parse(attempt)):
                    return attempt
            except (ValueError, RecursionError, UnicodeError):
                pass
        try:
            return json.dumps(self.value(doc), indent=2, ensure_ascii=False, default=str) + "\n"
        except (RecursionError, ValueError):
            return f"{MASK} (a {kind.upper()} file with secrets that could not be masked in place)\n"

    # -- structures -------------------------------------------------------------

    def value(self, obj: Any, key: Optional[str] = None) -> Any:
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v, k if isinstance(k, str) else None)
                    for k, v in obj.items()}
        if isinstance(obj, list):
            if key in _COMMAND_KEYS and 0 < len(obj) <= MAX_ARGS and all(isinstance(v, str) for v in obj):
                return self.command(obj)
            return [self.value(v, key) for v in obj]
        if isinstance(obj, str):
            if key is not None and obj and looks_secret_name(key) and obj != MASK and not _TRIVIAL.match(obj):
                self.count += 1
                return MASK
            return self.text(obj)
        return obj

    def summary(self) -> Dict[str, Any]:
        return {"always": True, "extended": self.extended, "redactions": self.count,
                "placeholders": {k: len(v) for k, v in sorted(self._maps.items())}}


def redactor_for(snapshot: Dict[str, Any], extended: bool) -> Redactor:
    """A redactor that knows this host's names and users (from the facts)."""
    facts = snapshot.get("facts", {}) or {}
    hostnames: List[str] = []
    hostname = (facts.get("system") or {}).get("hostname")
    if hostname:
        hostnames += [hostname, hostname.split(".")[0]]
    env = (facts.get("environment") or {}).get("variables") or {}
    users = [env.get(k) for k in ("USER", "LOGNAME", "SUDO_USER", "USERNAME")]
    home = env.get("HOME") or ""
    m = _HOME.match(home)
    if m:
        users.append(m.group(2))
    secrets = [v for k, v in env.items() if looks_secret_name(k)]
    versions: List[str] = []
    if extended:
        _version_values(facts, versions)
    return Redactor(extended=extended, hostnames=hostnames, usernames=[u for u in users if u], secret_values=secrets,
                    versions=versions)


def _version_values(obj: Any, out: List[str], key: str = "", depth: int = 0) -> None:
    """The dotted four-part strings the facts hold under a key that names a version ('version', 'driver_version')."""
    if depth > 12 or len(out) > 10000:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            _version_values(v, out, str(k), depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            _version_values(v, out, key, depth + 1)
    elif isinstance(obj, str) and "version" in key.lower() and _IPV4.fullmatch(obj):
        out.append(obj)


def redact(document: Dict[str, Any], extended: bool = False, snapshot: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Return a redacted copy of a report or snapshot, with a ``redaction`` summary added."""
    red = redactor_for(snapshot if snapshot is not None else document, extended)
    out = red.value(document)
    out["redaction"] = red.summary()
    return out


def for_public(report: Dict[str, Any], snapshot: Optional[Dict[str, Any]] = None,
               extended_already: bool = False) -> Dict[str, Any]:
    """The report as it may be pasted in public (the Markdown summary), with the extended redaction (host names,
    addresses, users) always on. Every text value goes through the redaction pass here, whatever the report says of
    itself (a saved report is a file anyone may have written or edited): the extended pass, or, where the caller has
    just applied it to this very report (``extended_already``), the secrets pass alone."""
    done = report.get("redaction")
    report = redact(report, extended=not extended_already, snapshot=dict(snapshot) if snapshot else None)
    if extended_already:
        report["redaction"] = done
    return report
