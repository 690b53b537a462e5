"""Symbol outlines of source files in languages other than Python, with tree-sitter.

:data:`LANGUAGES` maps a file suffix to a :class:`LanguageSpec`: the tree-sitter grammar
(bundled in the ``tree-sitter-language-pack`` wheel, loaded from disk, nothing downloaded) and
the node types that are functions, classes and the like. :func:`outline` parses a file and
says which lines form which symbol; :func:`rag.corpus.chunk.chunk_code` turns an outline into
chunks. Python stays on the ``ast`` chunker (:func:`rag.corpus.chunk.chunk_python`).

What an outline holds, for every language (as the Python chunker does):

* one ``function`` per top-level function (a function nested in a function stays in it);
* one ``class`` per class-like declaration — class, struct, union, interface, protocol,
  enum, trait, ``impl`` block, Ruby module, Kotlin object, type alias — holding the
  declaration minus its split-out methods and nested types;
* one ``method`` per function inside a class-like declaration (``Class.method``; nested
  types give ``Outer.Inner.method``), and per function whose name is qualified by a receiver
  or an owner (Go ``func (r *Router) Handle`` -> ``Router.Handle``, Kotlin
  ``fun Foo.ext()`` -> ``Foo.ext``, C++ ``void Foo::bar() {}`` -> ``Foo.bar``);
* ``<module>`` (kind ``module``): the remaining non-blank lines.

Namespaces prefix the names of what they hold and make no chunk of their own; C#, Java and
PHP namespaces/packages do not enter names. Lines are 1-based and inclusive. Names:

=============  ===================================================================
TS / JS        ``function foo``, ``const foo = () => ...``, ``const foo = function``
               -> ``foo`` (function); ``class C { m() {} }`` -> ``C``, ``C.m``; a class
               field holding an arrow function or function -> ``C.field`` (method);
               ``interface I``, ``enum E``, every ``type T = ...`` (one line or many)
               -> ``I``/``E``/``T`` (class); ``namespace z { ... }`` -> ``z.member``;
               ``declare module "m" { ... }`` -> ``m.member``; object-literal methods
               are not split; anonymous ``export default function`` is not a symbol
Go             ``func Foo`` -> ``Foo``; ``func (r *Router) Handle`` -> ``Router.Handle``
               (method); ``type Router struct`` / any ``type X ...`` -> ``Router`` (class),
               one per spec in a ``type ( ... )`` group
Rust           ``fn f`` -> ``f``; ``struct/enum/union/trait/type Foo`` -> ``Foo``;
               ``impl Foo`` and ``impl Trait for Foo`` -> ``Foo`` (class) with ``Foo.bar``;
               a trait's default method -> ``Trait.m``; ``mod m { fn f }`` -> ``m.f``
Java, C#       ``Class.method``, ``Outer.Inner.method``, constructor ``Class.Class``;
               class/interface/enum/record/struct (C#) -> class; methods without body stay
Kotlin         as Java; ``object O`` -> class; companion object members -> ``Class.m``;
               ``fun Foo.ext()`` -> ``Foo.ext`` (method); ``typealias`` -> class
Swift          as Java; ``struct``, ``enum``, ``protocol``, ``actor``, ``extension Foo``
               -> ``Foo`` (class); ``init`` / ``deinit`` -> ``Class.init``
C / C++        ``name`` for functions; ``struct/union/enum/class Foo {...}`` -> ``Foo``;
               ``typedef ... name;`` and ``using X = ...`` -> class named by the alias;
               in-class definitions -> ``Foo.bar``; ``void Foo::bar() {}`` -> ``Foo.bar``
               (method); ``namespace ns`` -> ``ns.f``; a ``.h`` whose C tree has errors
               and whose C++ tree has none is read as C++
Ruby           ``class Foo; def bar`` -> ``Foo.bar``; ``def self.bar`` and methods in
               ``class << self`` -> ``Foo.bar``; ``module M`` acts like a class;
               ``class A::B`` -> ``A.B``
PHP            ``class/interface/trait/enum Foo { function bar }`` -> ``Foo.bar``;
               ``function f`` -> ``f``
=============  ===================================================================

Rules shared by every language:

* A symbol's lines start at the comments, decorators and attributes directly above it (no
  blank line between; the first of them alone on its line): doc comments are where these
  languages keep what Python keeps in docstrings. ``export``, ``template <...>``, ``type``
  (Go) and ``const x =`` around a single declaration belong to it.
* Every line belongs to one chunk: a line goes to the first symbol, in file order, that
  holds it, and a class-like declaration keeps the line of its name (so
  ``class A { m() {} }`` on one line is the class ``A`` alone, and of two symbols on one
  line the second is part of the first).
* A function without a body (an interface or abstract method, a C++ in-class declaration)
  stays in its class; a TypeScript ``function`` signature (overloads, ``.d.ts``) is a symbol.
* A file falls back to line windows when its tree has syntax errors and no symbol was found,
  or when two symbols start on one line longer than the line bound (minified code).
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping

__all__ = ["LanguageSpec", "LANGUAGES", "Outline", "Part", "language_for", "language_name",
           "outline", "language_stats", "SYMBOL_KINDS"]

#: Chunk kinds that name a symbol (``<module>`` and windows do not).
SYMBOL_KINDS = frozenset({"function", "class", "method"})


@dataclass(frozen=True)
class LanguageSpec:
    """How one grammar's syntax tree maps onto symbols.

    Attributes:
        name: the language's name in statistics (``typescript`` covers .ts and .tsx).
        grammar: the tree-sitter-language-pack grammar.
        functions: node types that are functions (``method`` inside a class-like node).
        containers: class-like node types (kind ``class``); their body's functions are
            methods, their body's class-like nodes nested types.
        namespaces: node types whose name prefixes their members' names; no chunk of their
            own (without a name they act as ``transparent``).
        transparent: node types whose members are looked for inside, unnamed, no chunk
            (C# namespaces, ``#ifdef`` blocks, ``extern "C" {}``, Kotlin companion objects).
        wrappers: node types around one declaration (``export``, ``template <>``): their
            lines join the declaration's when exactly one symbol is inside.
        var_functions: node types ``name = value`` that are a function when ``value_field``
            holds one of ``function_values`` (``const foo = () => ...``).
        name_fields: node type -> the field that names it (default ``name``).
        name_types: where a node has no name field, its first named child of these types is
            its name (Kotlin).
        fixed_names: node types with a fixed name (Swift ``init``).
        body_types: body node types of grammars that have no ``body`` field (Kotlin).
        needs_body: node types that are symbols only with a body (a C ``struct s`` reference,
            a Java interface method).
        receiver_field: the field of a function node that holds its receiver, whose first
            type name qualifies the function (Go, Kotlin).
        leading: node types attached to the symbol they directly precede (comments,
            decorators, attributes).
        alternate: a spec tried when this grammar's tree has errors; its outline is used when
            its tree has none (C headers that hold C++).
    """

    name: str
    grammar: str
    functions: frozenset[str]
    containers: frozenset[str]
    namespaces: frozenset[str] = frozenset()
    transparent: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()
    var_functions: frozenset[str] = frozenset()
    function_values: frozenset[str] = frozenset()
    value_field: str = "value"
    name_fields: Mapping[str, str] = field(default_factory=dict)
    name_types: frozenset[str] = frozenset()
    fixed_names: Mapping[str, str] = field(default_factory=dict)
    body_types: frozenset[str] = frozenset()
    needs_body: frozenset[str] = frozenset()
    receiver_field: str | None = None
    leading: frozenset[str] = frozenset()
    alternate: LanguageSpec | None = None


def _types(*names: str) -> frozenset[str]:
    return frozenset(names)


_JS_LIKE = dict(
    functions=_types("function_declaration", "generator_function_declaration",
                     "function_signature", "method_definition"),
    containers=_types("class_declaration", "abstract_class_declaration",
                      "interface_declaration", "type_alias_declaration", "enum_declaration"),
    namespaces=_types("internal_module", "module"),
    wrappers=_types("export_statement", "ambient_declaration", "lexical_declaration",
                    "variable_declaration", "expression_statement"),
    var_functions=_types("variable_declarator", "public_field_definition", "field_definition"),
    function_values=_types("arrow_function", "function_expression", "function",
                           "generator_function"),
    name_fields={"field_definition": "property"},
    leading=_types("comment", "decorator"),
)
TYPESCRIPT = LanguageSpec(name="typescript", grammar="typescript", **_JS_LIKE)
TSX = LanguageSpec(name="typescript", grammar="tsx", **_JS_LIKE)
JAVASCRIPT = LanguageSpec(name="javascript", grammar="javascript", **_JS_LIKE)

GO = LanguageSpec(
    name="go", grammar="go",
    functions=_types("function_declaration", "method_declaration"),
    containers=_types("type_spec", "type_alias"),
    wrappers=_types("type_declaration"),
    receiver_field="receiver",
    leading=_types("comment"),
)

RUST = LanguageSpec(
    name="rust", grammar="rust",
    functions=_types("function_item"),
    containers=_types("struct_item", "enum_item", "union_item", "trait_item", "impl_item",
                      "type_item"),
    namespaces=_types("mod_item"),
    name_fields={"impl_item": "type"},
    leading=_types("line_comment", "block_comment", "attribute_item"),
)

JAVA = LanguageSpec(
    name="java", grammar="java",
    functions=_types("method_declaration", "constructor_declaration",
                     "compact_constructor_declaration"),
    containers=_types("class_declaration", "interface_declaration", "enum_declaration",
                      "record_declaration", "annotation_type_declaration"),
    transparent=_types("enum_body_declarations"),
    needs_body=_types("method_declaration"),
    leading=_types("line_comment", "block_comment"),
)

CSHARP = LanguageSpec(
    name="csharp", grammar="csharp",
    functions=_types("method_declaration", "constructor_declaration"),
    containers=_types("class_declaration", "struct_declaration", "interface_declaration",
                      "enum_declaration", "record_declaration", "record_struct_declaration"),
    transparent=_types("namespace_declaration", "file_scoped_namespace_declaration"),
    needs_body=_types("method_declaration"),
    leading=_types("comment"),
)

KOTLIN = LanguageSpec(
    name="kotlin", grammar="kotlin",
    functions=_types("function_declaration"),
    containers=_types("class_declaration", "object_declaration", "type_alias"),
    transparent=_types("companion_object"),
    name_types=_types("type_identifier", "simple_identifier"),
    body_types=_types("class_body", "enum_class_body", "function_body"),
    needs_body=_types("function_declaration"),
    receiver_field="receiver",
    leading=_types("line_comment", "multiline_comment"),
)

SWIFT = LanguageSpec(
    name="swift", grammar="swift",
    functions=_types("function_declaration", "init_declaration", "deinit_declaration"),
    containers=_types("class_declaration", "protocol_declaration", "typealias_declaration"),
    fixed_names={"init_declaration": "init", "deinit_declaration": "deinit"},
    needs_body=_types("function_declaration"),
    leading=_types("comment", "multiline_comment"),
)

_C_LIKE = dict(
    functions=_types("function_definition"),
    needs_body=_types("struct_specifier", "union_specifier", "enum_specifier",
                      "class_specifier"),
    transparent=_types("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif",
                       "preproc_elifdef", "linkage_specification"),
    name_fields={"function_definition": "declarator", "type_definition": "declarator"},
    leading=_types("comment"),
)
CPP = LanguageSpec(
    name="cpp", grammar="cpp",
    containers=_types("class_specifier", "struct_specifier", "union_specifier",
                      "enum_specifier", "type_definition", "alias_declaration"),
    namespaces=_types("namespace_definition"),
    wrappers=_types("template_declaration", "declaration", "field_declaration"),
    **_C_LIKE,
)
C = LanguageSpec(
    name="c", grammar="c",
    containers=_types("struct_specifier", "union_specifier", "enum_specifier",
                      "type_definition"),
    wrappers=_types("declaration"),
    alternate=CPP,
    **_C_LIKE,
)

PHP = LanguageSpec(
    name="php", grammar="php",
    functions=_types("function_definition", "method_declaration"),
    containers=_types("class_declaration", "interface_declaration", "trait_declaration",
                      "enum_declaration"),
    transparent=_types("namespace_definition"),
    needs_body=_types("method_declaration"),
    leading=_types("comment"),
)

RUBY = LanguageSpec(
    name="ruby", grammar="ruby",
    functions=_types("method", "singleton_method"),
    containers=_types("class", "module"),
    transparent=_types("singleton_class"),
    leading=_types("comment"),
)

#: File suffix (lower case) -> its language. Python is not here: it stays on ``ast``.
LANGUAGES: Mapping[str, LanguageSpec] = {
    **dict.fromkeys((".ts", ".mts", ".cts"), TYPESCRIPT),
    ".tsx": TSX,
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), JAVASCRIPT),
    ".go": GO,
    ".rs": RUST,
    ".java": JAVA,
    ".c": C, ".h": C,
    **dict.fromkeys((".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++"), CPP),
    ".cs": CSHARP,
    ".rb": RUBY,
    ".php": PHP,
    ".kt": KOTLIN, ".kts": KOTLIN,
    ".swift": SWIFT,
}

_PYTHON_SUFFIXES = (".py", ".pyi")


def _suffix(path: str) -> str:
    name = path.rsplit("/", 1)[-1].lower()
    dot = name.rfind(".")
    return name[dot:] if dot > 0 else ""


def language_for(path: str) -> LanguageSpec | None:
    """The :class:`LanguageSpec` of ``path``'s suffix, or None (no grammar: windows)."""
    return LANGUAGES.get(_suffix(path))


def language_name(path: str) -> str | None:
    """The language of a source file: ``python`` or a :class:`LanguageSpec` name; None for
    anything else (documentation, configuration, a language without a grammar here)."""
    if _suffix(path) in _PYTHON_SUFFIXES:
        return "python"
    spec = language_for(path)
    return spec.name if spec else None


@functools.lru_cache(maxsize=None)
def _language(grammar: str):
    """The tree-sitter Language of ``grammar``, loaded once per process (the pack's wheel
    bundles every grammar as a shared library; nothing is downloaded)."""
    from tree_sitter_language_pack import get_language

    return get_language(grammar)


def _parse(grammar: str, source: bytes):
    # A Parser costs well under a microsecond, and py-tree-sitter releases the GIL while it
    # parses, so one shared Parser would not be safe across threads: one per call.
    from tree_sitter import Parser

    return Parser(_language(grammar)).parse(source)


# --------------------------------------------------------------------------- outline


@dataclass(frozen=True)
class Part:
    """One chunk-to-be of an outline.

    Attributes:
        symbol: the qualified symbol, or ``<module>``.
        kind: function | class | method | module.
        lines: its 1-based line numbers, ascending (not consecutive for a class, whose
            methods are left out, or for ``<module>``).
        breaks: line numbers where a statement or member starts: where a part too big for
            one chunk may be cut.
    """

    symbol: str
    kind: str
    lines: tuple[int, ...]
    breaks: frozenset[int]


@dataclass(frozen=True)
class Outline:
    """The symbols of one file, and the language whose grammar found them."""

    language: str
    parts: tuple[Part, ...]


@dataclass
class _Sym:
    symbol: str
    kind: str
    start: int  # 1-based, inclusive
    end: int
    head: int  # the line of a class's name: its members start after it
    members: list[_Sym] = field(default_factory=list)
    breaks: set[int] = field(default_factory=set)


# names that are read whole; the qualified ones are split into their parts
_QUALIFIED = frozenset({"qualified_identifier", "nested_namespace_specifier", "nested_identifier",
                        "scope_resolution", "namespace_name", "user_type"})
_LEAVES = _QUALIFIED | frozenset({
    "identifier", "type_identifier", "field_identifier", "property_identifier",
    "private_property_identifier", "simple_identifier", "constant", "name",
    "namespace_identifier", "string_fragment", "destructor_name", "operator_name", "operator",
    "setter", "computed_property_name"})
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_QUALIFIER = re.compile(r"::|\.|\\")
_OPERATOR = re.compile(r"(?<![A-Za-z0-9_$])operator(?![A-Za-z0-9_$])")


def _first_line(node) -> int:
    return node.start_point[0] + 1


def _last_line(node) -> int:
    row, col = node.end_point
    return row if col == 0 and row > node.start_point[0] else row + 1


class _Walker:
    """One file's walk: the spec, the source bytes and the symbol starts seen."""

    def __init__(self, spec: LanguageSpec, source: bytes):
        self.spec = spec
        self.source = source
        self.starts: list[int] = []  # first line of every symbol node found (before settling)

    def text(self, node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def body(self, node):
        body = node.child_by_field_name("body")
        if body is None and self.spec.body_types:
            body = next((c for c in node.named_children if c.type in self.spec.body_types),
                        None)
        return body

    def members(self, node, *, transparent: bool) -> list:
        body = self.body(node)
        if body is not None:
            return body.named_children
        return node.named_children if transparent else []

    def name_node(self, node):
        """The node that names a declaration (an identifier, or a qualified name), or None."""
        target = node.child_by_field_name(self.spec.name_fields.get(node.type, "name"))
        if target is None and self.spec.name_types:
            target = next((c for c in node.named_children if c.type in self.spec.name_types),
                          None)
        while target is not None and target.type not in _LEAVES and target.named_child_count:
            nxt = None
            for f in ("declarator", "name", "type"):
                nxt = target.child_by_field_name(f)
                if nxt is not None:
                    break
            target = nxt if nxt is not None else target.named_children[0]
        return target

    def name(self, node) -> list[str] | None:
        """The name of a declaration, split into its qualified parts; None when it has none."""
        fixed = self.spec.fixed_names.get(node.type)
        if fixed:
            return [fixed]
        target = self.name_node(node)
        if target is None:
            return None
        text = "".join(self.text(target).split())
        if target.type in _QUALIFIED:  # Foo<T>::bar, ns::Foo::operator<, A.B, Foo::Bar
            op = _OPERATOR.search(text)
            head, tail = (text[:op.start()], text[op.start():]) if op else (text, "")
            prev = None
            while prev != head:
                prev, head = head, _TEMPLATE_ARGS.sub("", head)
            parts = [p for p in _QUALIFIER.split(head) if p] + ([tail] if tail else [])
        else:
            parts = [text] if text else []
        return parts or None

    def receiver(self, node) -> list[str]:
        if self.spec.receiver_field is None:
            return []
        recv = node.child_by_field_name(self.spec.receiver_field)
        stack = [recv] if recv is not None else []
        while stack:  # the first type name, depth first
            n = stack.pop()
            if n.type == "type_identifier":
                return [self.text(n)]
            stack.extend(reversed(n.named_children))
        return []

    def is_function(self, node) -> bool:
        spec = self.spec
        if node.type in spec.functions:
            return node.type not in spec.needs_body or self.body(node) is not None
        if node.type in spec.var_functions:
            value = node.child_by_field_name(spec.value_field)
            return value is not None and value.type in spec.function_values
        return False

    def leading_start(self, nodes: list, i: int) -> int:
        """First line of the comments/decorators/attributes directly above ``nodes[i]``."""
        start = _first_line(nodes[i])
        j = i - 1
        while j >= 0 and nodes[j].type in self.spec.leading and _last_line(nodes[j]) >= start - 1:
            n = nodes[j]
            line_start = n.start_byte - n.start_point[1]
            if self.source[line_start:n.start_byte].strip():
                break  # shares its line with the code before it
            start = _first_line(n)
            j -= 1
        return start

    def symbols(self, nodes: list, prefix: str, in_class: bool, breaks: set[int]) -> list[_Sym]:
        out: list[_Sym] = []
        for i, node in enumerate(nodes):
            breaks.add(_first_line(node))
            found = self.classify(node, prefix, in_class, breaks)
            if len(found) == 1 and node.type not in self.spec.transparent \
                    and node.type not in self.spec.namespaces:
                found[0].start = min(found[0].start, self.leading_start(nodes, i))
            out.extend(found)
        return out

    def classify(self, node, prefix: str, in_class: bool, breaks: set[int]) -> list[_Sym]:
        spec, t = self.spec, node.type
        if t in spec.wrappers:
            inner = self.symbols(node.named_children, prefix, in_class, set())
            if len(inner) == 1:
                inner[0].start = min(inner[0].start, _first_line(node))
                inner[0].end = max(inner[0].end, _last_line(node))
            return inner
        if t in spec.transparent:
            return self.symbols(self.members(node, transparent=True), prefix, in_class, breaks)
        if t in spec.namespaces:
            parts = self.name(node)
            inner_prefix = prefix + "".join(p + "." for p in parts or [])
            return self.symbols(self.members(node, transparent=True), inner_prefix, False,
                                breaks)
        if self.is_function(node):
            parts = self.name(node)
            if not parts:
                return []
            parts = self.receiver(node) + parts
            kind = "method" if in_class or len(parts) > 1 else "function"
            self.starts.append(_first_line(node))
            return [_Sym(prefix + ".".join(parts), kind, _first_line(node), _last_line(node),
                         _first_line(node))]
        if t in spec.containers:
            if t in spec.needs_body and self.body(node) is None:
                return []
            parts = self.name(node)
            if not parts:
                return []
            qual = prefix + ".".join(parts)
            self.starts.append(_first_line(node))
            head = self.name_node(node)
            sym = _Sym(qual, "class", _first_line(node), _last_line(node),
                       _first_line(head if head is not None else node))
            sym.members = self.symbols(self.members(node, transparent=False), qual + ".", True,
                                       sym.breaks)
            return [sym]
        return []


def _settle(syms: list[_Sym], floor: int) -> list[_Sym]:
    """Give every line to the first symbol that holds it: each symbol starts after ``floor``
    (the last line already given) and after the previous symbol; one left with no line is
    dropped (its text is in the symbol before it). A class keeps the line of its name."""
    kept = []
    for s in syms:
        s.start = max(s.start, floor + 1)
        if s.start > s.end:
            continue
        s.members = _settle(s.members, max(s.start, s.head))
        floor = s.end
        kept.append(s)
    return kept


def _parts(syms: list[_Sym], out: list[Part]) -> None:
    for s in syms:
        inner = {n for m in s.members for n in range(m.start, m.end + 1)}
        lines = tuple(n for n in range(s.start, s.end + 1) if n not in inner)
        out.append(Part(s.symbol, s.kind, lines, frozenset(s.breaks)))
        _parts(s.members, out)


def outline(text: str, lines: list[str], spec: LanguageSpec, *,
            max_line_chars: int) -> Outline | None:
    """The symbols of a source file, or None when it should be chunked by windows.

    Args:
        text: the file.
        lines: its lines with their endings (:func:`rag.corpus.chunk.split_lines`).
        spec: its language.
        max_line_chars: the line bound: two symbols starting on one longer line mean
            minified code, which is windowed.

    Returns:
        An :class:`Outline` whose parts hold every non-blank line of the file exactly once
        (symbols in file order, ``<module>`` last); None when the tree has errors and no
        symbol, the file looks minified, or its declarations nest too deep to walk.
    """
    # tree-sitter counts rows at "\n" only; a lone "\r" ends a line for split_lines too
    source = re.sub(r"\r(?!\n)", "\n", text).encode("utf-8", "surrogatepass")
    tree = _parse(spec.grammar, source)
    if tree.root_node.has_error and spec.alternate is not None:
        other = _parse(spec.alternate.grammar, source)
        if not other.root_node.has_error:
            spec, tree = spec.alternate, other
    walker = _Walker(spec, source)
    module_breaks: set[int] = set()
    try:
        syms = walker.symbols(tree.root_node.named_children, "", False, module_breaks)
    except RecursionError:  # declarations nested beyond Python's stack
        return None
    if not syms and tree.root_node.has_error:
        return None
    per_line = Counter(walker.starts)
    if any(k > 1 and len(lines[n - 1]) > max_line_chars
           for n, k in per_line.items() if n <= len(lines)):
        return None
    syms = _settle(syms, 0)
    parts: list[Part] = []
    _parts(syms, parts)
    held = {n for s in syms for n in range(s.start, s.end + 1)}
    rest = tuple(n for n in range(1, len(lines) + 1) if n not in held and lines[n - 1].strip())
    parts.append(Part("<module>", "module", rest, frozenset(module_breaks)))
    return Outline(spec.name, tuple(parts))


# --------------------------------------------------------------------------- statistics


def language_stats(chunks: Iterable) -> dict[str, float | int]:
    """Per-language chunking counts of an index, from its chunks alone (so a build whose
    chunks come from the chunk store gives the same numbers).

    Code files are those :func:`language_name` knows (Python included); issues and pull
    requests are not code. For each language ``L`` that has a file:

    * ``lang/L/chunks``: its chunks;
    * ``lang/L/files_symbol``: files chunked by symbol (any chunk not a window), and
      ``lang/L/files_windowed``: files chunked by windows (no grammar result, syntax errors,
      minified code);
    * ``lang/L/symbol_coverage``: the share of its files' non-blank lines that lie in a
      symbol chunk (function, class, method; not ``<module>``, not a window);

    and ``symbol_coverage`` over every code file. A line's number comes from its chunk: a
    chunk's lines are consecutive unless it is a class or ``<module>`` chunk, whose lines no
    other chunk of its file holds (every line of a symbol-chunked file is in one chunk).
    """
    from rag.corpus.chunk import split_lines  # chunk imports this module

    by_file: dict[str, list] = defaultdict(list)
    for c in chunks:
        if c.category in ("issue", "pull_request"):
            continue
        if language_name(c.path) is not None:
            by_file[c.path].append(c)
    out: dict[str, float | int] = {}
    counts: dict[str, Counter] = defaultdict(Counter)
    for path, file_chunks in sorted(by_file.items()):
        lang = language_name(path)
        stat = counts[lang]
        stat["chunks"] += len(file_chunks)
        windowed = all(c.kind == "window" for c in file_chunks)
        stat["files_windowed" if windowed else "files_symbol"] += 1
        nonblank: dict[int, bool] = {}  # line -> inside a symbol chunk
        loose_total = loose_symbol = 0  # lines of non-consecutive chunks
        for c in file_chunks:
            in_symbol = c.kind in SYMBOL_KINDS
            if "@" in c.id.rsplit(":", 1)[-1]:  # a piece of a long line
                nonblank[c.start_line] = nonblank.get(c.start_line, False) or in_symbol
                continue
            texts = split_lines(c.text)
            if len(texts) == c.end_line - c.start_line + 1:
                for n, line in enumerate(texts, start=c.start_line):
                    if line.strip():
                        nonblank[n] = nonblank.get(n, False) or in_symbol
            else:
                k = sum(1 for line in texts if line.strip())
                loose_total += k
                loose_symbol += k if in_symbol else 0
        stat["lines"] += len(nonblank) + loose_total
        stat["symbol_lines"] += sum(nonblank.values()) + loose_symbol
    total = symbol = 0
    for lang in sorted(counts):
        stat = counts[lang]
        out[f"lang/{lang}/chunks"] = stat["chunks"]
        out[f"lang/{lang}/files_symbol"] = stat["files_symbol"]
        out[f"lang/{lang}/files_windowed"] = stat["files_windowed"]
        out[f"lang/{lang}/symbol_coverage"] = round(stat["symbol_lines"] / stat["lines"], 4) \
            if stat["lines"] else 0.0
        total += stat["lines"]
        symbol += stat["symbol_lines"]
    out["symbol_coverage"] = round(symbol / total, 4) if total else 0.0
    return out


def describe_languages(stats: dict) -> str | None:
    """One line for people from :func:`language_stats`' keys in an index's stats: chunks per
    language with its files chunked by symbol and in windows, then the symbol coverage; None
    when the stats have no language key (an index built before they existed)."""
    langs = sorted({k.split("/")[1] for k in stats if k.startswith("lang/")})
    if not langs:
        return None

    def one(name: str) -> str:
        def g(f: str) -> int:
            return int(stats.get(f"lang/{name}/{f}", 0))
        return (f"{name} {g('chunks')} chunks ({g('files_symbol')} files by symbol, "
                f"{g('files_windowed')} in windows)")

    return ("languages: " + "; ".join(one(n) for n in langs)
            + f"; symbol coverage {100 * float(stats.get('symbol_coverage', 0)):.1f}% of code lines")
