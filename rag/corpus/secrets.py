"""Token-shaped secrets found by content in any text, and their redaction.

A whole file that *is* a secret (a private key, a keystore, a ``.env`` with credentials, ...)
is never read into the index at all (:func:`rag.corpus.walk.secret_kind`). Everywhere else a
secret is a *literal* inside ordinary code, documentation or configuration —
``GITHUB_TOKEN = "ghp_…"`` in a script, a Slack token in a README, a hard-coded password in
``settings.py``. Such a literal is replaced, where the text enters the pipeline
(:func:`rag.corpus.walk.walk_corpus` and the documents that are not files), by a marker
``[REDACTED:<kind>]`` (:func:`redact_secrets`), so the rest of the file stays searchable and
the value is never chunked, embedded, written to an index, served or logged. The line
structure is kept (a marker never holds a line break), so line spans stay valid.

The rules (:data:`TOKEN_RULES`, one registry; the kinds in :data:`REDACTION_KINDS`) are the
default rules of gitleaks re-expressed in Python ``re``: gitleaks v8 ``config/gitleaks.toml``
(MIT licence), https://github.com/gitleaks/gitleaks/blob/009e025ad4106ab333aa0b9dc4f2a884390d134c/config/gitleaks.toml
— rule ids ``github-pat``, ``github-oauth``, ``github-app-token``, ``github-refresh-token``,
``github-fine-grained-pat``, ``gitlab-pat``, ``slack-bot-token``, ``slack-legacy-bot-token``,
``slack-user-token``, ``slack-legacy-token``, ``slack-legacy-workspace-token``,
``slack-app-token``, ``slack-config-access-token``, ``slack-config-refresh-token``,
``slack-webhook-url``, ``stripe-access-token``, ``gcp-api-key``, ``jwt``,
``npm-access-token``, ``pypi-upload-token``, ``openai-api-key``, ``anthropic-api-key``,
``anthropic-admin-api-key``, ``huggingface-access-token`` and ``generic-api-key`` — each with
gitleaks' minimum Shannon entropy (bits per character, :func:`shannon_entropy`) of the
literal. Differences, all deliberate:

* a token's end is ``(?![\\w-])`` (gitleaks: one of ``'"`;``, whitespace, ``\\n`` or the
  end), so a key followed by ``<``, ``)`` or ``,`` is found too, and the fixed lengths of
  the GitHub (36, ``github_pat_`` 82), GitLab (20), Google (35) and npm (36) rules are
  lower bounds (GitHub 30, Google 30), so a token of another length — GitHub says its
  lengths may grow — is redacted whole, never in part;
* Slack tokens: also detect-secrets' ``SlackDetector`` pattern
  (``xox[abposr]-(\\d+-)+[a-z0-9]+``, https://github.com/Yelp/detect-secrets, 1.5.0), and
  any ``xox?-`` word of 10+ letters, digits and ``-`` holding a digit (``xoxb-your-token``
  is prose);
* gitleaks' allowlist of 16 public Firebase keys for ``gcp-api-key`` is not kept: a public
  key redacted costs nothing;
* ``generic-api-key`` is narrowed: the assigned name must *end* in a credential word
  (``password``, ``passwd``, ``pwd``, ``passphrase``, ``pass`` after another word
  (``db_pass``), ``secret``, ``token``,
  ``api_key``/``apikey``, ``secret_key``, ``private_key``, ``access_key``, ``auth_key``,
  ``signing_key``, ``encryption_key``, ``master_key``, ``client_key``, ``credential(s)``;
  any case, camelCase too) — ``token_url``, ``password_field``, ``secret_name`` are not
  credentials — and a few names are never credentials (``csrf_token``, ``next_page_token``,
  ``public_key``, ``unk_token``, ...; gitleaks' allowlist has the first kind). The value is a
  quoted one-line literal without whitespace or escapes, or, unquoted, the rest of a
  ``key: value`` / ``key = value`` line (YAML, INI, shell; a YAML colon has a space after
  it) that does not look like code: no brackets, quotes, ``:`` or ``|``, no ``$ % & * ! ?``
  first, and an identifier only with a digit in it, naming no credential or type
  (``token = tok``, ``private_key: PKCS7PrivateKeyTypes`` are code; so, unquoted in source,
  is ``password = letmein``; in a config file, :func:`has_literal_values`, an unquoted value
  is a literal and judged as a quoted one).
  It is no placeholder, URL, path, file name, template, number, UUID, reference or
  ``snake_case`` identifier (:func:`generic_value_is_secret`). Two kinds with their own
  bars: ``generic_secret`` (gitleaks': at least 10 characters, not only letters, ``_``,
  ``.`` and ``-``, entropy >= 3.5) and ``password`` (names ending in a password word: at
  least 6 characters, entropy >= 2.0, a letters-only value neither camelCase nor naming a
  credential) — human-chosen passwords are short and low in entropy, so gitleaks' 3.5
  would let ``hunter22`` through.

Measured on the 18 semble repositories, Flask 3.1.3, this repository and its virtualenv
(docs/corpus.md gives the counts): what the rules flag there is test fixtures and
documentation examples, and no file is lost (a literal is redacted, the file kept).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

#: the marker that replaces a secret literal: ``[REDACTED:github_token]``
MARKER = "[REDACTED:{kind}]"

# ------------------------------------------------------------------------- placeholders

_PLACEHOLDER = re.compile(
    r"^(?:<[^>]*>|\$\{[^}]*\}|\$\{\{.*\}\}|\{\{.*\}\}|\{[A-Za-z_][\w.]*\}|%\([\w.]*\)s|%s"
    r"|\$[A-Z_][A-Z0-9_]*|\$\([^)]*\)|([xX*._#-])\1*"
    r"|(?i:your\b.*|your[_\-].*|my[_\-]?(?:password|passwd|pass|secret|token|key)\d*|changeme"
    r"|change[_\-]me|replace[_\-]?me|placeholder|todo|tbd|none|null|nil|true|false|yes|no|0|1"
    r"|password|passwd|pass|pwd|pw|secret|token|xxx+|\*+|dummy|fake|example|sample|test"
    r"|foo|bar|baz|.*example.*|.*[xX*]{4,}.*|.*(?:\u2026|\.\.\.).*))$")


def is_placeholder(value: str) -> bool:
    """Empty or a stand-in: ``<...>``, ``${VAR}``, ``$VAR`` (an UPPER_CASE name only:
    ``$uperS3cret`` is a value), ``{{ var }}``, ``%(name)s``, ``xxx``/``***``, ``changeme``,
    ``your-...``, ``password``/``pass``/``secret``, anything holding ``example``, ``xxxx`` or an
    ellipsis (``...``/``\u2026``: documentation elides real values)."""
    return value == "" or bool(_PLACEHOLDER.match(value))


def shannon_entropy(value: str) -> float:
    """Shannon entropy of ``value``'s characters in bits per character (0.0 for ``""``):
    ``-sum(p * log2(p))`` over the frequency ``p`` of each distinct character, as gitleaks
    computes it. A 36-character random alphanumeric token has about 4.9; ``aaaa`` has 0."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


# ------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class TokenRule:
    """One detection rule of :data:`TOKEN_RULES`.

    Attributes:
        kind: the redaction kind (``[REDACTED:<kind>]``, a key of the counts).
        source: the gitleaks (or detect-secrets) rule ids it re-expresses.
        pattern: the regular expression; the literal to redact is its group ``s``.
        keywords: lower-case strings one of which the text must hold for the rule to run
            (gitleaks' keywords: a cheap pre-filter).
        min_entropy: the literal's least Shannon entropy (bits per character).
        accept: a further check of a match, ``accept(match, literal_values)`` (None: every
            match with enough entropy); ``literal_values``: the text is a config file's,
            whose unquoted values are literals (:func:`redact_secrets`).
    """

    kind: str
    source: str
    pattern: re.Pattern
    keywords: tuple[str, ...]
    min_entropy: float = 0.0
    accept: Callable[[re.Match, bool], bool] | None = None


_END = r"(?![\w-])"  # a token ends where no word character or '-' follows


def _token(kind: str, source: str, regex: str, keywords: tuple[str, ...],
           min_entropy: float, flags: int = 0) -> TokenRule:
    """A :class:`TokenRule` whose whole match (``regex`` wrapped in group ``s``) is the
    token, ending at :data:`_END`, not a placeholder."""
    return TokenRule(kind=kind, source=source,
                     pattern=re.compile(f"(?P<s>{regex}){_END}", flags), keywords=keywords,
                     min_entropy=min_entropy,
                     accept=lambda m, _literal: not is_placeholder(m.group("s")))


# the last word of an assigned name that makes its value a credential, and of those, the
# ones that make it a password (lower-cased, separators _ . - or camelCase; "pass" only
# after another word: db_pass, never a bare 'pass': 'bandpass')
_CRED_TAIL = (r"passw(?:or)?d|passphrase|(?<![a-z])pwd|(?<=[a-z0-9][_.-])pass|secret|token"
              r"|api[_.-]?key|(?:secret|private|access|auth|signing|encryption|master|client)"
              r"[_.-]?key|secret[_.-]?key[_.-]?base|credentials?")
_PASSWORD_TAIL = re.compile(r"(?:passw(?:or)?d|passphrase|pwd|pass)$", re.I)
# names ending in a credential word that are not credentials (gitleaks' allowlist has the
# csrf and public ones; the rest are tokenizers' special tokens and pagination cursors)
_NOT_CREDENTIAL = re.compile(
    r"(?:^|[_.\-]|(?<=[a-z])(?=[A-Z]))(?i:csrf|xsrf|public|publishable|pub|unk|pad|bos|eos|cls"
    r"|sep|mask|eot|eom|next|next[_.-]?page|page|continuation|cursor|sync|start|end|special"
    r"|input|output)"
    r"[_.\-]?(?i:token|key)$")
_GENERIC = re.compile(
    r"(?P<name>(?i:" + _CRED_TAIL + r"))(?![\w])"  # the name's last word (see _full_name)
    r"[\"'\]]{0,2}"                                   # a key's closing quote / bracket
    r"(?:[ \t]*:[ \t]*[A-Za-z_][\w.\[\], |]{0,40}?(?=[ \t]*=))?"  # password: str = ...
    r"[ \t]*(?P<op>:=|=>|\|\|=|\?\?=|=(?![=~>])|:(?![:=]))(?P<ws>[ \t]*)"
    r"(?:[rRbBuUfF]{0,2}(?P<q>[\"'`])(?P<s>[^\"'`\s\\]{1,1000})(?P=q)"
    r"|(?P<u>[^\s\"'`,;:#(){}\[\]<>$%|&*!?][^\s\"'`,;:(){}\[\]<>|]{0,999})"
    r"(?=[ \t]*[,;]?(?:[ \t]+(?:#|//).*)?[ \t]*$))",
    re.M)
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")          # an environment variable's name
# a.b.c, a::b, a->b, pkg.mod:attr (an entry point)
_REFERENCE = re.compile(r"^[A-Za-z_$][\w$]*(?:(?:\.|::|->|:)[A-Za-z_$][\w$]*)+$")
_SNAKE = re.compile(r"^_*[a-z][a-z0-9]*(?:_+[a-z0-9]+)+$")  # password_hash, _convert_v2
_IDENT = re.compile(r"^[A-Za-z_$][\w$]*$")
_CAMEL = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)+$|^(?:[A-Z][a-z0-9]+){2,}$")  # fooBar, FooBar
# PKCS7PrivateKeyTypes, HttpClient: two or more capitalised words (a random string is not)
_TYPE_NAME = re.compile(r"^(?:[A-Z]{2,}[0-9]*(?=[A-Z])|[A-Z][a-z]{2,}[0-9]*){2,}$")
_WORDS_ONLY = re.compile(r"^[A-Za-z_.\-]+$")             # gitleaks' generic allowlist
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")           # an error code, a port, a count
_UUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_TEMPLATE = re.compile(r"\{[^{}]*\}")                    # f"{name}", "{0}", "${x}"
_CRED_WORD = re.compile(r"passw(?:or)?d|passphrase|secret|token|credential|key", re.I)
_FILE_LIKE = re.compile(
    r"^(?:/|\./|\.\./|~/|[A-Za-z]:\\)|://|/.*\.\w{1,5}$"
    r"|\.(?:pem|key|crt|cer|der|p12|pfx|jks|pub|json|ya?ml|toml|ini|cfg|conf|txt|env|gpg"
    r"|asc|html?|md|py|js|ts)$", re.I)

#: the least length and Shannon entropy (bits per character) of a generic literal, by kind
#: (see the module docstring and :func:`generic_value_is_secret`)
GENERIC_BARS = {"generic_secret": {"min_len": 10, "min_entropy": 3.5},
                "password": {"min_len": 6, "min_entropy": 2.0}}


def generic_kind(name: str) -> str | None:
    """The generic kind of an assigned name: ``password`` (it ends in ``password``,
    ``passwd``, ``passphrase``, ``pwd``, ``pass``), ``generic_secret`` (another credential
    word), or None when the name is one that is never a credential (``csrf_token``)."""
    bare = name.strip("\"'[]$").rsplit(".", 1)[-1] if "." in name else name.strip("\"'[]$")
    if _NOT_CREDENTIAL.search(bare):
        return None
    return "password" if _PASSWORD_TAIL.search(bare) else "generic_secret"


def generic_value_is_secret(value: str, *, kind: str, quoted: bool) -> bool:
    """Whether ``value``, assigned to a name of generic ``kind``, is a secret literal.

    Never: a placeholder (:func:`is_placeholder`), a marker, a
    URL, a path or a file name, a template (``f"{name}"``), a number, a UUID (an id; services
    whose keys are UUIDs need a rule of their own), an ``UPPER_CASE`` name, a reference
    (``a.b``, ``pkg.mod:attr``), a ``snake_case`` identifier; unquoted, an identifier
    without a digit (``token = tok``), one naming a credential (``R2Credentials``) or a
    type (two capitalised words: ``PKCS7PrivateKeyTypes``). Then over the bars of
    :data:`GENERIC_BARS` for its kind: ``generic_secret`` never only letters, ``_``, ``.``,
    ``-`` (gitleaks); ``password`` of only letters (and ``_.-``) not a camelCase word
    (``challengePassword``) nor one that names a credential (``new-passphrase``)."""
    if (is_placeholder(value) or "[REDACTED:" in value
            or _FILE_LIKE.search(value) or _TEMPLATE.search(value) or _NUMBER.match(value)
            or _UUID.match(value) or _CONSTANT.match(value) or _REFERENCE.match(value)
            or _SNAKE.match(value)):
        return False
    bars = GENERIC_BARS[kind]
    if len(value) < bars["min_len"] or shannon_entropy(value) < bars["min_entropy"]:
        return False
    bare = value.rstrip("?!")
    if not quoted and _IDENT.match(bare) and (
            not re.search(r"\d", bare) or _CRED_WORD.search(bare)
            or _TYPE_NAME.match(bare)):
        return False
    if not _WORDS_ONLY.match(value):
        return True
    return kind == "password" and not _CAMEL.match(value) and not _CRED_WORD.search(value)


def _full_name(m: re.Match) -> str:
    """The whole name a match of the generic rule assigns to: its credential word and the
    name characters (word characters, ``.``, ``$``, ``-``) before it (a pattern anchored on
    the credential word scans a text many times faster than one that starts at every
    name)."""
    text, start = m.string, m.start("name")
    i = start
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_.$-"):
        i -= 1
    return text[i:m.end("name")]


def _accept_generic(m: re.Match, literal_values: bool = False) -> bool:
    kind = generic_kind(_full_name(m))
    value = m.group("s") if m.group("s") is not None else m.group("u")
    if m.group("s") is None and m.group("op") == ":" and not m.group("ws"):
        return False  # "password:string" is no YAML mapping (a mapping's colon has a space)
    # in a config file an unquoted value is a literal, never an identifier of code
    quoted = m.group("s") is not None or literal_values
    return kind is not None and generic_value_is_secret(value, kind=kind, quoted=quoted)


_SLACK = ("xoxb", "xoxp", "xoxa", "xoxo", "xoxs", "xoxr", "xoxe", "xapp")

#: every rule, in the order they are applied (specific formats before the generic
#: assignment rules, which never see a literal already redacted).
TOKEN_RULES: tuple[TokenRule, ...] = (
    _token("github_token", "github-pat, github-oauth, github-app-token, github-refresh-token",
           r"gh[pousr]_[0-9a-zA-Z]{30,251}", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), 3.0),
    _token("github_token", "github-fine-grained-pat", r"github_pat_\w{30,244}",
           ("github_pat_",), 3.0),
    _token("gitlab_token", "gitlab-pat", r"glpat-[\w-]{20,250}", ("glpat-",), 3.0),
    _token("slack_token", "slack-config-access-token, slack-config-refresh-token",
           r"(?i:xoxe\.xox[bp]-\d-[A-Z0-9]{163,166}|xoxe-\d-[A-Z0-9]{146})", ("xoxe",), 2.0),
    _token("slack_token", "slack-bot-token, slack-user-token, slack-legacy-bot-token, "
           "slack-legacy-token, slack-legacy-workspace-token; detect-secrets SlackDetector",
           r"xoxb-[0-9]{10,13}-[0-9]{10,13}[a-zA-Z0-9-]*|xoxb-[0-9]{8,14}-[a-zA-Z0-9]{18,26}"
           r"|xox[pe](?:-[0-9]{10,13}){3}-[a-zA-Z0-9-]{28,34}|xox[os]-\d+-\d+-\d+-[a-fA-F\d]+"
           r"|xox[ar]-(?:\d-)?[0-9a-zA-Z]{8,48}|(?i:xox[abposr]-(?:\d+-)+[a-z0-9]+)"
           r"|xox[abposre]-(?=[A-Za-z0-9-]*\d)[A-Za-z0-9-]{10,}",  # any other with a digit
           _SLACK, 2.0),
    _token("slack_token", "slack-app-token", r"(?i:xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)",
           ("xapp",), 2.0),
    _token("slack_webhook", "slack-webhook-url",
           r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}",
           ("hooks.slack.com",), 0.0),
    _token("stripe_key", "stripe-access-token",
           r"\b(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99}",
           ("sk_test", "sk_live", "sk_prod", "rk_test", "rk_live", "rk_prod"), 2.0),
    _token("google_api_key", "gcp-api-key", r"\bAIza[\w-]{30,251}", ("aiza",), 4.0),
    _token("jwt", "jwt",
           r"\bey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9/\\_-]{17,}\.(?:[a-zA-Z0-9/\\_-]{10,}={0,2})?",
           ("ey",), 3.0),
    _token("npm_token", "npm-access-token", r"\b(?i:npm_[a-z0-9]{36,251})", ("npm_",), 2.0),
    _token("pypi_token", "pypi-upload-token", r"pypi-AgEIcHlwaS5vcmc[\w-]{50,1000}",
           ("pypi-ageichlwas5vcmc",), 3.0),
    _token("openai_key", "openai-api-key",
           r"\bsk-(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ"
           r"(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})|\bsk-[a-zA-Z0-9]{20}T3BlbkFJ[a-zA-Z0-9]{20}",
           ("t3blbkfj",), 3.0),
    _token("anthropic_key", "anthropic-api-key, anthropic-admin-api-key",
           r"\bsk-ant-(?:api03|admin01)-[a-zA-Z0-9_\-]{93}AA", ("sk-ant-",), 0.0),
    _token("huggingface_token", "huggingface-access-token", r"\bhf_(?i:[a-z]{34})", ("hf_",),
           2.0),
    # a UUID is an id unless a Heroku name is assigned it (gitleaks' heroku-api-key, whose
    # keyword is the service's name; the generic rule never takes a UUID)
    TokenRule("heroku_key", "heroku-api-key",
              re.compile(r"(?i:heroku)[\w.\-]{0,20}[\"'\]]{0,2}[ \t]*(?::=|=>|=|:)[ \t]*"
                         r"[\"'`]?(?P<s>[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})"
                         + _END),
              ("heroku",), 0.0, lambda m, _literal: not is_placeholder(m.group("s"))),
    TokenRule("generic_secret", "generic-api-key (narrowed: see the module docstring)",
              _GENERIC, ("pass", "pwd", "secret", "token", "key", "credential"), 0.0,
              _accept_generic),
)

#: every kind a literal can be redacted as, in :data:`TOKEN_RULES` order (``password`` is
#: the generic rule's second kind); each is reported as ``secrets_redacted_<kind>``.
REDACTION_KINDS: tuple[str, ...] = tuple(dict.fromkeys(
    [r.kind for r in TOKEN_RULES if r.kind != "generic_secret"]
    + ["generic_secret", "password"]))


def _kind_of(rule: TokenRule, m: re.Match) -> str:
    """The kind a match of ``rule`` is redacted as (the generic rule has two)."""
    if rule.pattern is _GENERIC:
        return generic_kind(_full_name(m)) or rule.kind
    return rule.kind


def redact_secrets(text: str, *, literal_values: bool = False) -> tuple[str, Counter]:
    """``text`` with every secret literal that :data:`TOKEN_RULES` finds replaced by
    ``[REDACTED:<kind>]`` (nothing else changes: quotes, names and line breaks stay), and the
    number of literals redacted per kind (an empty Counter when nothing was found, and then
    ``text`` itself is returned).

    Args:
        literal_values: ``text`` is a config file's (YAML, INI, TOML, properties, .env:
            :func:`has_literal_values`), where ``password: hunterhunter`` assigns a literal:
            an unquoted value is judged as a quoted one (in code it may be an identifier).

    The values are never returned, logged or kept."""
    found: Counter = Counter()
    lowered = None
    for rule in TOKEN_RULES:
        if lowered is None:
            lowered = text.lower()
        if not any(k in lowered for k in rule.keywords):
            continue

        def replace(m: re.Match, rule: TokenRule = rule) -> str:
            group = "s" if m.group("s") is not None else "u"
            value = m.group(group)
            if (shannon_entropy(value) < rule.min_entropy
                    or (rule.accept is not None and not rule.accept(m, literal_values))):
                return m.group(0)
            kind = _kind_of(rule, m)
            found[kind] += 1
            start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
            whole = m.group(0)
            return whole[:start] + MARKER.format(kind=kind) + whole[end:]

        new = rule.pattern.sub(replace, text)
        if new != text:
            text, lowered = new, None
    return text, found


#: suffixes of config files whose unquoted values are literals (:func:`has_literal_values`)
LITERAL_VALUE_SUFFIXES = frozenset({".yaml", ".yml", ".ini", ".cfg", ".conf", ".toml",
                                    ".properties", ".env"})


def has_literal_values(path: str) -> bool:
    """Whether the file ``path`` (any separators) is a config file whose unquoted values are
    literals: a suffix of :data:`LITERAL_VALUE_SUFFIXES`, or a ``.env`` / ``.env.*`` name."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return (name.startswith(".env") or "." in name
            and "." + name.rsplit(".", 1)[-1] in LITERAL_VALUE_SUFFIXES)


def find_secrets(text: str) -> Counter:
    """The number of secret literals per kind that :func:`redact_secrets` would redact."""
    return redact_secrets(text)[1]
