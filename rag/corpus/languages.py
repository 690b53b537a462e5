"""Symbol outlines of source files in languages other than Python, with tree-sitter.

:data:`LANGUAGES` maps a file suffix to a :class:`LanguageSpec`: the tree-sitter grammar
(bundled in the ``tree-sitter-language-pack`` wheel, loaded from disk, nothing downloaded) and
the node types that are functions, classes and the like. :func:`outline` parses a file and
says which lines form which symbol; :func:`rag.corpus.chunk.chunk_code` turns an outline into
chunks. Python stays on the ``ast`` chunker (:func:`rag.corpus.chunk.chunk_python`).

What an outline holds, for every language (as the Python chunker does):

* one ``function`` per top-level function (a function nested in a function stays in it;
  in TypeScript and JavaScript a *class* declared directly in a top-level function's body
  is a chunk of its own, ``enableMapSet.DraftMap`` with ``enableMapSet.DraftMap.get``, as
  plugin and factory functions such as immer's ``enableMapSet`` hold whole classes that
  could not be named otherwise; elsewhere, and in methods, everything stays in the
  function; Python keeps its ``ast`` rule: nested classes stay in their function);
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
               a top-level ``app.use = function``, ``Foo.prototype.bar = function``,
               ``exports.f = () => ...`` -> ``app.use``, ``Foo.bar``, ``exports.f``
               (method); ``interface I``, ``enum E``, every ``type T = ...`` (one line or many)
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
Elixir         ``defmodule A.B do def f ...`` -> ``A.B`` (class), ``A.B.f`` (method);
               ``defp``/``defmacro``/``defguard``/``defdelegate`` as ``def``;
               ``defimpl P, for: T`` and ``defprotocol P`` -> class ``P``; a ``def``
               with ``when`` is named by its call; ``@doc``/``@spec`` above are its lines
Lua            ``function f``, ``local function f``, ``local f = function`` -> ``f``;
               ``function M.f``, ``function M:f`` and ``M.f = function`` -> ``M.f``
               (method); ``---`` LuaDoc and ``-- @`` annotations lead a function
Haskell        ``data``, ``newtype``, ``type``, ``class`` -> class; ``instance C T``
               -> ``T`` (class, as Rust's ``impl C for T``); a function's equations,
               with its type signature and Haddock above, are one function (``decode
               "" = ...; decode s = ...``); in a class or instance body -> ``C.method``
Zig            ``fn f`` -> ``f``; ``const A = struct {...}`` (also ``enum``, ``union``,
               ``opaque``) -> ``A`` (class) with its ``fn`` members as ``A.m``; an error
               set, an import, a ``test`` block stay in ``<module>``
=============  ===================================================================

Rules shared by every language:

* A symbol's lines start at the comments, decorators and attributes directly above it (no
  blank line between; the first of them alone on its line): doc comments are where these
  languages keep what Python keeps in docstrings. A *doc comment* (``/** */`` in
  TS/JS/Java/Kotlin/PHP/C#/Swift/Rust/C/C++; ``///`` in Rust, C#, Swift, C/C++; Doxygen's
  ``//!`` and ``/*!`` in C/C++; any ``#`` comment in Ruby but magic comments such as
  ``# frozen_string_literal``) belongs to the declaration below it across one blank line
  too (commander puts a blank line under every JSDoc), once per declaration; an ordinary
  ``//`` or ``/* */`` comment one blank line above stays where it is (``<module>`` or its
  class): it is as often a section note as a declaration's. Not across the blank line: a
  comment that starts on the file's first line or names a licence, copyright or the file
  (``@license``, ``@file``, ``@module``...), the file's header; Rust's ``//!``/``/*!``,
  which document the enclosing module; Go's comments (``go doc`` reads only the comment
  directly above). ``export``, ``template <...>``, ``type`` (Go) and ``const x =`` around
  a single declaration belong to it.
* Every line belongs to one chunk: a line goes to the first symbol, in file order, that
  holds it, and a class-like declaration keeps the line of its name (so
  ``class A { m() {} }`` on one line is the class ``A`` alone, and of two symbols on one
  line the second is part of the first).
* A function without a body (an interface or abstract method, a C++ in-class declaration)
  stays in its class; a TypeScript ``function`` signature (overloads, ``.d.ts``) is a symbol.
* A tree with syntax errors can lose declarations into ``ERROR`` nodes (immer's
  ``types-external.ts``: interface call signatures the TypeScript grammar cannot read lose
  ``IProduce`` and everything after it). Then every top-level line no symbol holds that
  starts, at column 0, like a declaration (the spec's ``recover`` pattern: ``export
  interface I``, ``type T =``, ``function f``, ``fn``, ``func``, ``class``, ``struct``...)
  is recovered: its text, from the comment lines above it to where its brackets close, is
  parsed again alone and gives its symbols when that parse is clean (``Producer``,
  ``never_used``); otherwise it is one symbol of the keyword's kind (class or function)
  named by the pattern (``IProduce``, with its members inside). Ruby and C/C++ have no
  pattern. :func:`language_stats` counts the files with errors.
* A file falls back to line windows when its tree has syntax errors and no symbol was found
  (nor recovered), or when two symbols start on one line longer than the line bound
  (minified code).
"""

from __future__ import annotations

import bisect
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
        value_fields: node type -> the field that holds its value (default ``value_field``:
            JavaScript's ``app.use = function`` holds it in ``right``).
        value_lists: node types of a ``var_functions`` node's child that holds the
            ``value_field`` instead of the node itself (Lua's ``expression_list``).
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
        doc_comment: a regex matching the start of this language's doc comments (``/**``,
            ``///``, Ruby ``#``): such a comment still belongs to the declaration below it
            across one blank line. None: only adjacent comments do (Go).
        local_classes: class node types that, in a top-level function's body, become chunks
            of their own (``enableMapSet.DraftMap``); empty: everything stays in the function.
        recover: a regex matching a top-level declaration line (at column 0) whose ``cls`` or
            ``fn`` group says the kind and ``name`` group the name: the declarations a tree
            with errors lost are looked for with it (see :func:`outline`).
        call_kinds: for grammars whose declarations are calls (Elixir's ``defmodule``,
            ``def``): the callee's name -> ``class`` or ``function``. A node of a type in
            ``call_types`` whose ``target`` is such a name is that kind of symbol, named by
            its first argument (an alias ``A.B``, a call ``f(x)``, ``f(x) when ...``, or a
            bare name), its members the ``body_types`` child (``do_block``).
        merge_clauses: a function declared by several adjacent clauses of one name (Haskell's
            equations ``decode "" = ...``, ``decode s = ...``) is one symbol.
        body_via: node types a declaration's body is looked for through, when it is not a
            direct child (Zig's ``const A = struct {...}``: the ``ContainerDecl`` inside the
            value's expression nodes).
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
    value_fields: Mapping[str, str] = field(default_factory=dict)
    value_lists: frozenset[str] = frozenset()
    name_fields: Mapping[str, str] = field(default_factory=dict)
    name_types: frozenset[str] = frozenset()
    fixed_names: Mapping[str, str] = field(default_factory=dict)
    body_types: frozenset[str] = frozenset()
    needs_body: frozenset[str] = frozenset()
    receiver_field: str | None = None
    leading: frozenset[str] = frozenset()
    alternate: LanguageSpec | None = None
    doc_comment: str | None = None
    local_classes: frozenset[str] = frozenset()
    recover: str | None = None
    call_kinds: Mapping[str, str] = field(default_factory=dict)
    call_types: frozenset[str] = frozenset()
    merge_clauses: bool = False
    body_via: frozenset[str] = frozenset()


#: the symbol of a file's remaining top-level code (imports, constants, module statements)
MODULE_SYMBOL = "<module>"


def _types(*names: str) -> frozenset[str]:
    return frozenset(names)


# doc comments: /** (not /**/ nor /***), /// (not ////); //! and /*! are not: in Rust they
# document the enclosing module, in JavaScript /*! marks a licence kept by minifiers
_BLOCK_DOC = r"/\*\*(?![*/])"
_SLASH_DOC = r"/\*\*(?![*/])|///(?!/)"
_MODIFIERS = (r"(?:(?:public|private|protected|internal|abstract|final|static|sealed|partial|"
              r"open|data|readonly|fileprivate|export|pub(?:\([^)]*\))?|unsafe|async|const|"
              r"inline|value|enum|annotation)\s+)*")
_RECOVER_CLASSES = (_MODIFIERS + r"(?:(?P<cls>class|interface|enum|record|struct|object|"
                    r"protocol|trait|union|type|typealias)|(?P<fn>fn|fun|func|function))"
                    r"\s+(?P<name>[A-Za-z_]\w*)")

_JS_LIKE = dict(
    functions=_types("function_declaration", "generator_function_declaration",
                     "function_signature", "method_definition"),
    containers=_types("class_declaration", "abstract_class_declaration",
                      "interface_declaration", "type_alias_declaration", "enum_declaration"),
    namespaces=_types("internal_module", "module"),
    wrappers=_types("export_statement", "ambient_declaration", "lexical_declaration",
                    "variable_declaration", "expression_statement"),
    # const f = () => ..., a class field holding a function, and app.use = function (...),
    # Foo.prototype.bar = function, exports.f = function at the top level
    var_functions=_types("variable_declarator", "public_field_definition", "field_definition",
                         "assignment_expression"),
    function_values=_types("arrow_function", "function_expression", "function",
                           "generator_function"),
    value_fields={"assignment_expression": "right"},
    name_fields={"field_definition": "property", "assignment_expression": "left"},
    leading=_types("comment", "decorator"),
    doc_comment=_BLOCK_DOC,
    local_classes=_types("class_declaration", "abstract_class_declaration"),
    recover=(r"(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?"
             r"(?:(?P<cls>class|interface|enum|type)|(?P<fn>(?:async\s+)?function\s*\*?))"
             r"\s+(?P<name>[A-Za-z_$][\w$]*)"),
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
    # Go's doc comment is the comment directly above (go doc); a blank line ends it
    recover=r"(?:(?P<fn>func)\s+(?:\([^)]*\)\s*)?|(?P<cls>type)\s+)(?P<name>[A-Za-z_]\w*)",
)

RUST = LanguageSpec(
    name="rust", grammar="rust",
    functions=_types("function_item"),
    containers=_types("struct_item", "enum_item", "union_item", "trait_item", "impl_item",
                      "type_item"),
    namespaces=_types("mod_item"),
    name_fields={"impl_item": "type"},
    leading=_types("line_comment", "block_comment", "attribute_item"),
    doc_comment=_SLASH_DOC,
    recover=_RECOVER_CLASSES,
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
    doc_comment=_BLOCK_DOC,
    recover=_RECOVER_CLASSES,
)

CSHARP = LanguageSpec(
    name="csharp", grammar="csharp",
    functions=_types("method_declaration", "constructor_declaration"),
    containers=_types("class_declaration", "struct_declaration", "interface_declaration",
                      "enum_declaration", "record_declaration", "record_struct_declaration"),
    transparent=_types("namespace_declaration", "file_scoped_namespace_declaration"),
    needs_body=_types("method_declaration"),
    leading=_types("comment"),
    doc_comment=_SLASH_DOC,
    recover=_RECOVER_CLASSES,
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
    doc_comment=_BLOCK_DOC,
    recover=_RECOVER_CLASSES,
)

SWIFT = LanguageSpec(
    name="swift", grammar="swift",
    functions=_types("function_declaration", "init_declaration", "deinit_declaration"),
    containers=_types("class_declaration", "protocol_declaration", "typealias_declaration"),
    fixed_names={"init_declaration": "init", "deinit_declaration": "deinit"},
    needs_body=_types("function_declaration"),
    leading=_types("comment", "multiline_comment"),
    doc_comment=_SLASH_DOC,
    recover=_RECOVER_CLASSES,
)

_C_LIKE = dict(
    functions=_types("function_definition"),
    needs_body=_types("struct_specifier", "union_specifier", "enum_specifier",
                      "class_specifier"),
    transparent=_types("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif",
                       "preproc_elifdef", "linkage_specification"),
    name_fields={"function_definition": "declarator", "type_definition": "declarator"},
    leading=_types("comment"),
    doc_comment=r"/\*[*!](?![*/])|//[/!](?!/)",  # Doxygen: //! and /*! document what follows
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
    doc_comment=_BLOCK_DOC,
    recover=_RECOVER_CLASSES,
)

RUBY = LanguageSpec(
    name="ruby", grammar="ruby",
    functions=_types("method", "singleton_method"),
    containers=_types("class", "module"),
    transparent=_types("singleton_class"),
    leading=_types("comment"),
    # RDoc/YARD: every # comment block documents what follows (magic comments excepted)
    doc_comment=r"#(?!\s*(?:frozen_string_literal|encoding|coding|-\*-|typed|rubocop|!))|=begin",
)

SCALA = LanguageSpec(
    name="scala", grammar="scala",
    # a `def` without a body (an abstract member) is a function_declaration: kept in its trait
    functions=_types("function_definition"),
    containers=_types("class_definition", "object_definition", "trait_definition",
                      "enum_definition", "type_definition"),
    namespaces=_types("package_object"),
    body_types=_types("template_body", "enum_body"),
    leading=_types("comment", "block_comment"),
    doc_comment=_BLOCK_DOC,  # Scaladoc
)

BASH = LanguageSpec(
    name="shell", grammar="bash",
    functions=_types("function_definition"),
    containers=frozenset(),
    leading=_types("comment"),
    # a comment block above a function documents it (shellcheck directives excepted)
    doc_comment=r"#(?!!|\s*shellcheck)",
)

ELIXIR = LanguageSpec(
    name="elixir", grammar="elixir",
    # every declaration is a call: `defmodule A.B do ... end`, `def f(x), do: ...`
    functions=frozenset(), containers=frozenset(),
    call_types=_types("call"),
    call_kinds={**dict.fromkeys(("defmodule", "defprotocol", "defimpl"), "class"),
                **dict.fromkeys(("def", "defp", "defmacro", "defmacrop", "defguard",
                                 "defguardp", "defdelegate", "defn", "defnp"), "function")},
    body_types=_types("do_block"),
    # comments and module attributes (@doc, @spec, @impl) directly above a definition
    leading=_types("comment", "unary_operator"),
    doc_comment=r"@(?:doc|spec|impl|typedoc)\b",
)

LUA = LanguageSpec(
    name="lua", grammar="lua",
    # function f(), local function f(), function M.f(), function M:f() (a method of M);
    # M.f = function() ... end and local f = function() ... end as f, M.f
    functions=_types("function_declaration"),
    containers=frozenset(),
    wrappers=_types("variable_declaration"),
    var_functions=_types("assignment_statement"),
    function_values=_types("function_definition"),
    value_lists=_types("expression_list"),
    name_types=_types("variable_list"),
    leading=_types("comment"),
    doc_comment=r"---|--\s*@",  # LuaDoc / EmmyLua annotations
)

HASKELL = LanguageSpec(
    name="haskell", grammar="haskell",
    # a function's equations are one symbol, its type signature and Haddock lead it
    functions=_types("function", "bind"),
    containers=_types("data_type", "newtype", "class", "instance", "type_synomym",
                      "type_family", "data_family"),
    transparent=_types("declarations"),
    # `instance ToJSON Bool` is named by its type, as Rust's `impl Trait for Foo` is: the
    # class's name stays defined once, by the class
    name_fields={"instance": "patterns"},
    body_types=_types("class_declarations", "instance_declarations"),
    leading=_types("haddock", "comment", "signature", "pragma"),
    doc_comment=r"--\s*[|^]",
    merge_clauses=True,
)

ZIG = LanguageSpec(
    name="zig", grammar="zig",
    # `fn f()` is a Decl holding the FnProto (the name) and the Block: the Decl wraps it
    functions=_types("FnProto"),
    # `const A = struct {...}` (enum, union, opaque): a VarDecl with a ContainerDecl inside its
    # value; a VarDecl without one (`const std = @import("std")`) is no symbol
    containers=_types("VarDecl"),
    wrappers=_types("Decl"),
    name_fields={"FnProto": "function", "VarDecl": "variable_type_function"},
    body_types=_types("ContainerDecl"),
    body_via=_types("ErrorUnionExpr", "SuffixExpr"),
    needs_body=_types("VarDecl"),
    leading=_types("doc_comment", "line_comment"),
    doc_comment=r"///",
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
    ".scala": SCALA, ".sc": SCALA,
    ".sh": BASH, ".bash": BASH,
    ".ex": ELIXIR, ".exs": ELIXIR,
    ".lua": LUA,
    ".hs": HASKELL,
    ".zig": ZIG,
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
                        "scope_resolution", "namespace_name", "user_type",
                        # Lua: function M.setup(), function Picker:new()
                        "dot_index_expression", "method_index_expression",
                        # JavaScript: app.use = function, Foo.prototype.bar = function
                        "member_expression"})
_LEAVES = _QUALIFIED | frozenset({
    "identifier", "type_identifier", "field_identifier", "property_identifier",
    "private_property_identifier", "simple_identifier", "constant", "name",
    "namespace_identifier", "string_fragment", "destructor_name", "operator_name", "operator",
    "setter", "computed_property_name"})
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_JS_NAME = re.compile(r"^[A-Za-z_$][\w$]*$")
_QUALIFIER = re.compile(r"::|\.|\\|:")
_OPERATOR = re.compile(r"(?<![A-Za-z0-9_$])operator(?![A-Za-z0-9_$])")
# a doc comment that is the file's header, not a declaration's documentation
_FILE_HEADER = re.compile(r"@license|@preserve|@file|@fileoverview|@module\b|"
                          r"@packageDocumentation|copyright|SPDX-License", re.IGNORECASE)


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
        self.doc_re = re.compile(spec.doc_comment) if spec.doc_comment else None
        self.line_starts: list[int] | None = None

    def text(self, node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def body(self, node):
        body = node.child_by_field_name("body")
        if body is None and self.spec.body_types:
            body = next((c for c in node.named_children if c.type in self.spec.body_types),
                        None)
            via = [c for c in node.named_children if c.type in self.spec.body_via]
            while body is None and via:  # through the value's expression nodes
                c = via.pop(0)
                body = next((g for g in c.named_children if g.type in self.spec.body_types),
                            None)
                via.extend(g for g in c.named_children if g.type in self.spec.body_via)
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

    def value_node(self, node):
        """The value a ``var_functions`` node binds (``const f = () => ...``): its
        ``value_field`` child, or that field's child of a ``value_lists`` child (Lua's
        ``M.f = function`` holds it in an ``expression_list``); None when it has none."""
        value = node.child_by_field_name(self.spec.value_fields.get(node.type,
                                                                    self.spec.value_field))
        if value is None and self.spec.value_lists:
            held = next((c for c in node.named_children if c.type in self.spec.value_lists), None)
            value = held.child_by_field_name(self.spec.value_field) if held is not None else None
        return value

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
            if target.type == "member_expression":
                if not all(_JS_NAME.match(p) for p in parts):
                    return None  # (x as any).f, a?.b, f().g: not a name
                # Foo.prototype.bar is Foo's method bar (only between an owner and a member)
                parts = [p for n, p in enumerate(parts)
                         if not (p == "prototype" and 0 < n < len(parts) - 1)]
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

    def call_kind(self, node) -> str | None:
        """``class`` / ``function`` for a declaration that is a call (:attr:`LanguageSpec.
        call_kinds`), else None."""
        if node.type not in self.spec.call_types:
            return None
        target = node.child_by_field_name("target")
        if target is None or target.type != "identifier":
            return None
        return self.spec.call_kinds.get(self.text(target))

    def call_name(self, node) -> list[str] | None:
        """The name a declaring call gives: its first argument — an alias (``A.B`` -> A, B),
        a call's target (``f(x)``), the left side of a guard (``f(x) when ...``) or a name."""
        args = next((c for c in node.named_children if c.type == "arguments"), None)
        first = args.named_children[0] if args is not None and args.named_child_count else None
        while first is not None and first.type == "binary_operator":  # f(x) when guard
            first = first.child_by_field_name("left")
        if first is not None and first.type == "call":
            first = first.child_by_field_name("target")
        if first is None:
            return None
        text = "".join(self.text(first).split())
        parts = [p for p in text.split(".") if p] if first.type == "alias" else [text]
        return parts if parts and all(parts) else None

    def is_function(self, node) -> bool:
        spec = self.spec
        if self.call_kind(node) == "function":
            return True
        if node.type in spec.functions:
            return node.type not in spec.needs_body or self.body(node) is not None
        if node.type in spec.var_functions:
            value = self.value_node(node)
            if value is None or value.type not in spec.function_values:
                return False
            # the name must be the whole target: app[method] = function, M["f"] = function
            # and (x as any).f = function name nothing (their first part is not the target)
            target = self.name_node(node)
            return target is not None and self.name(node) is not None \
                and "".join(self.text(target).split()) == "".join(
                    self.text(self._target(node)).split())
        return False

    def _target(self, node):
        """The node a ``var_functions`` node binds (its name field, else its ``name_types``
        child: Lua's ``variable_list``), or the node itself."""
        target = node.child_by_field_name(self.spec.name_fields.get(node.type, "name"))
        if target is None and self.spec.name_types:
            target = next((c for c in node.named_children if c.type in self.spec.name_types),
                          None)
        if target is not None and target.type in self.spec.name_types \
                and target.named_child_count == 1:
            target = target.named_children[0]  # Lua: the variable_list's one variable
        return target if target is not None else node
        return False

    def is_doc(self, node) -> bool:
        """Whether a leading node is a doc comment that may stand one blank line above its
        declaration: the spec's doc pattern, and not a file header (a comment on the file's
        first line, or one naming a licence, copyright or the file itself)."""
        if self.doc_re is None or _first_line(node) == 1:
            return False
        text = self.text(node)
        return bool(self.doc_re.match(text)) and not _FILE_HEADER.search(text)

    def blank_between(self, first: int, last: int) -> bool:
        """Whether lines ``first``..``last`` (1-based, inclusive) are all blank."""
        return all(not self.line(n).strip() for n in range(first, last + 1))

    def line(self, number: int) -> bytes:
        if self.line_starts is None:
            self.line_starts = [0] + [m.end() for m in re.finditer(rb"\n", self.source)]
        if number - 1 >= len(self.line_starts):
            return b""
        begin = self.line_starts[number - 1]
        end = self.line_starts[number] if number < len(self.line_starts) else len(self.source)
        return self.source[begin:end]

    def leading_start(self, nodes: list, i: int) -> int:
        """First line of the comments/decorators/attributes directly above ``nodes[i]``: no
        blank line between, except one blank line below a doc comment (:meth:`is_doc`), once."""
        start = _first_line(nodes[i])
        gap_used = False
        j = i - 1
        while j >= 0 and nodes[j].type in self.spec.leading:
            n = nodes[j]
            last = _last_line(n)
            if last < start - 1:  # a blank line between: crossed only to a doc comment
                if gap_used or last < start - 2 or not self.is_doc(n) \
                        or not self.blank_between(last + 1, start - 1):
                    break
                gap_used = True
            line_start = n.start_byte - n.start_point[1]
            if self.source[line_start:n.start_byte].strip():
                break  # shares its line with the code before it
            start = _first_line(n)
            j -= 1
        return start

    def local_classes(self, node, prefix: str) -> list[_Sym]:
        """The classes (:attr:`LanguageSpec.local_classes`) declared directly in a top-level
        function's body, as members ``function.Class`` with their methods."""
        if node.type in self.spec.var_functions:
            node = self.value_node(node)
        body = self.body(node) if node is not None else None
        if body is None:
            return []
        nodes = body.named_children
        out: list[_Sym] = []
        for i, child in enumerate(nodes):
            if child.type in self.spec.local_classes:
                found = self.classify(child, prefix, False, set())
                for f in found:
                    f.start = min(f.start, self.leading_start(nodes, i))
                out.extend(found)
        return out

    def symbols(self, nodes: list, prefix: str, in_class: bool, breaks: set[int]) -> list[_Sym]:
        out: list[_Sym] = []
        for i, node in enumerate(nodes):
            breaks.add(_first_line(node))
            found = self.classify(node, prefix, in_class, breaks)
            if len(found) == 1 and node.type not in self.spec.transparent \
                    and node.type not in self.spec.namespaces:
                found[0].start = min(found[0].start, self.leading_start(nodes, i))
            if (self.spec.merge_clauses and len(found) == 1 and out
                    and found[0].kind != "class" and not found[0].members
                    and (out[-1].symbol, out[-1].kind) == (found[0].symbol, found[0].kind)):
                out[-1].end = max(out[-1].end, found[0].end)  # one more clause of it
                continue
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
            parts = self.call_name(node) if self.call_kind(node) else self.name(node)
            if not parts:
                return []
            parts = self.receiver(node) + parts
            kind = "method" if in_class or len(parts) > 1 else "function"
            self.starts.append(_first_line(node))
            sym = _Sym(prefix + ".".join(parts), kind, _first_line(node), _last_line(node),
                       _first_line(node))
            if kind == "function" and spec.local_classes:
                sym.members = self.local_classes(node, sym.symbol + ".")
            return [sym]
        call_class = self.call_kind(node) == "class"
        if t in spec.containers or call_class:
            if t in spec.needs_body and self.body(node) is None:
                return []
            parts = self.call_name(node) if call_class else self.name(node)
            if not parts:
                return []
            qual = prefix + ".".join(parts)
            self.starts.append(_first_line(node))
            head = None if call_class else self.name_node(node)
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


_COMMENTISH = re.compile(r"\s*(?://|/\*|\*|#)")


def _extent(lines: list[str], first: int, limit: int) -> int:
    """The last line of the declaration starting on line ``first`` (at most ``limit``), read
    from the text alone: the first line where its brackets are balanced and the next non-blank
    line starts at column 0 (not with ``{``). Strings and comments are skipped roughly."""
    depth, in_block = 0, False
    for n in range(first, limit + 1):
        line = lines[n - 1]
        i, size = 0, len(line)
        while i < size:
            c = line[i]
            if in_block:
                if line.startswith("*/", i):
                    in_block, i = False, i + 2
                else:
                    i += 1
                continue
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                in_block, i = True, i + 2
                continue
            if c in "\"'`":
                j = i + 1
                while j < size and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                i = j + 1 if j < size else i + 1  # no closing quote: not a string (Rust 'a)
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            i += 1
        if depth <= 0 and not in_block:
            nxt = next((k for k in range(n + 1, limit + 1) if lines[k - 1].strip()), None)
            if nxt is None or not (lines[nxt - 1][:1].isspace() or lines[nxt - 1][:1] == "{"):
                return n
    return limit


def _text_leading(lines: list[str], n: int, top: int, doc_re: re.Pattern | None) -> int:
    """First line of the comment lines directly above line ``n`` (not above ``top``), read
    from the text: adjacent comment lines, or one blank line below a doc comment block."""
    start, k, gap = n, n - 1, False
    while k >= top:
        if not lines[k - 1].strip():
            if gap or doc_re is None:
                break
            j = k - 1
            while j >= top and lines[j - 1].strip() and _COMMENTISH.match(lines[j - 1]):
                j -= 1
            first = j + 1
            if first > k - 1 or first == 1 or not doc_re.match(lines[first - 1].lstrip()) \
                    or _FILE_HEADER.search("".join(lines[first - 1:k - 1])):
                break
            start, k, gap = first, first - 1, True
            continue
        if not _COMMENTISH.match(lines[k - 1]):
            break
        start, k = k, k - 1
    return start


def _recover(walker: _Walker, lines: list[str], syms: list[_Sym]) -> list[_Sym]:
    """Declarations a tree with errors lost: top-level lines no symbol holds that match the
    spec's ``recover`` pattern at column 0. Each one's text (from the comment lines above it
    to :func:`_extent`) is parsed again alone; a clean parse gives its symbols as any file's
    would, otherwise it is one symbol of the pattern's kind and name."""
    spec = walker.spec
    pattern = re.compile(spec.recover)
    held = {n for s in syms for n in range(s.start, s.end + 1)}
    out: list[_Sym] = []
    n, floor, total = 1, 0, len(lines)
    while n <= total:
        m = None if n in held else pattern.match(lines[n - 1])
        if m is None:
            n += 1
            continue
        limit = n
        while limit < total and limit + 1 not in held:
            limit += 1
        end = _extent(lines, n, limit)
        top = n
        while top - 1 > floor and top - 1 not in held \
                and (not lines[top - 2].strip() or _COMMENTISH.match(lines[top - 2])):
            top -= 1
        source = ("\n" * (top - 1) + "".join(lines[top - 1:end])).encode("utf-8", "surrogatepass")
        source = re.sub(rb"\r(?!\n)", b"\n", source)
        tree = _parse(spec.grammar, source)
        found: list[_Sym] = []
        if not tree.root_node.has_error:
            sub = _Walker(spec, source)
            found = sub.symbols(tree.root_node.named_children, "", False, set())
            walker.starts.extend(sub.starts)
        if not found:
            kind = "class" if m.group("cls") else "function"
            found = [_Sym(m.group("name"), kind, _text_leading(lines, n, top, walker.doc_re),
                          end, n)]
            walker.starts.append(n)
        out.extend(found)
        floor, n = end, end + 1
    return out


def _merge(syms: list[_Sym], extra: list[_Sym]) -> list[_Sym]:
    """``extra`` inserted into ``syms`` by first line, the order of ``syms`` kept."""
    out: list[_Sym] = []
    extra = sorted(extra, key=lambda s: s.start)
    i = 0
    for s in syms:
        while i < len(extra) and extra[i].start < s.start:
            out.append(extra[i])
            i += 1
        out.append(s)
    return out + extra[i:]


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
        if tree.root_node.has_error and spec.recover:
            syms = _merge(syms, _recover(walker, lines, syms))
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
    parts.append(Part(MODULE_SYMBOL, "module", rest, frozenset(module_breaks)))
    return Outline(spec.name, tuple(parts))


# --------------------------------------------------------------------------- statistics


def _bracket_delta(line: str) -> int:
    """Brackets opened minus closed on one line (strings and comments skipped roughly)."""
    depth, i, size = 0, 0, len(line)
    while i < size:
        c = line[i]
        if line.startswith(("//", "/*", "#"), i):
            break
        if c in "\"'`":
            j = line.find(c, i + 1)
            i = j + 1 if j > 0 else i + 1
            continue
        depth += (c in "([{") - (c in ")]}")
        i += 1
    return depth


def _by_depth(slots: list[int], texts: list[str], known: dict) -> list[int]:
    """Slots for the middle ``<module>`` lines ``texts[1:-1]``: a line goes to the next slot
    unless that would leave the next symbol line at the wrong bracket depth (an indented
    symbol outside the module's brackets, or one at column 0 inside them); the last slots are
    taken when the lines left need them all."""
    symbol_lines = sorted(n for n in known if isinstance(n, int))
    depth = _bracket_delta(texts[0])
    out: list[int] = []
    todo = texts[1:-1]
    for idx, slot in enumerate(slots):
        if len(out) == len(todo):
            break
        line = todo[len(out)]
        if len(slots) - idx > len(todo) - len(out):
            nxt = bisect.bisect_right(symbol_lines, slot)
            if nxt < len(symbol_lines):
                after = known[symbol_lines[nxt]]
                indented = after[:1].isspace()
                new = depth + _bracket_delta(line)
                if (new > 0) != indented and (depth > 0) == indented:
                    continue  # placing it here would break a consistent depth: leave blank
        out.append(slot)
        depth += _bracket_delta(line)
    return out


def _reassemble(file_chunks: list, split_lines, *, late: bool | str) -> str:
    """A file's text put back together from its chunks, for parsing again: every line a chunk
    holds at its line number. A chunk whose lines are consecutive, or a piece of a long line,
    gives them exactly; a class chunk (its span minus its members') the free numbers of its
    span; a ``<module>`` chunk its first and last line exactly and the others (whose numbers
    are lost among the blank lines it leaves out) at the earliest free numbers of its span,
    the latest with ``late=True``, or by bracket depth (:func:`_by_depth`) with
    ``late="depth"``. Blank lines no chunk holds are left out (they do not change
    a parse)."""
    known: dict[int, str] = {}
    pieces: dict[int, list[tuple[int, str]]] = defaultdict(list)
    loose = []
    for c in file_chunks:
        tail = c.id.rsplit(":", 1)[-1]
        if "@" in tail:
            pieces[c.start_line].append((int(tail.rsplit("@", 1)[1]), c.text))
            continue
        texts = split_lines(c.text)
        if len(texts) == c.end_line - c.start_line + 1:
            known.update(zip(range(c.start_line, c.end_line + 1), texts))
        else:
            loose.append((c, texts))
    for number, parts in pieces.items():
        known[number] = "".join(t for _, t in sorted(parts))
    # members before the classes around them, <module> last
    loose.sort(key=lambda ct: (ct[0].kind == "module", ct[0].end_line - ct[0].start_line))
    for c, texts in loose:
        free = [n for n in range(c.start_line, c.end_line + 1) if n not in known]
        k = len(texts)
        if len(free) < k or k < 2:  # not as the chunker makes them: in order after its start
            known.update((c.start_line + (i + 1) / (k + 1), t)  # type: ignore[misc]
                         for i, t in enumerate(texts))
            continue
        middle = free[1:-1]
        if late == "depth" and c.kind == "module":
            middle = _by_depth(middle, texts, known)
        else:
            middle = middle[len(middle) - (k - 2):] if late else middle[:k - 2]
        known.update(zip([free[0], *middle, free[-1]], texts))
    text = "".join(line if line.endswith(("\n", "\r")) else line + "\n"
                   for _, line in sorted(known.items()))
    return text


def _has_errors(path: str, file_chunks: list, split_lines) -> bool:
    """Whether a code file's text does not parse cleanly, read from its chunks: Python by
    ``ast`` (only a file in windows can have failed: the symbol chunker needs a parse), the
    other languages by their grammar (and its alternate, as :func:`outline`). A file in
    windows is put back exactly. In a file by symbol only the places of ``<module>`` lines
    among the symbols are lost, so it has errors when its ``<module>`` lines alone or its
    symbol lines alone (each in their exact order) have errors, and so does the whole file
    put together by :func:`_reassemble` with ``<module>`` lines early, late and by bracket
    depth (a misplaced
    line alone must not count; on immer, commander, zod and nanoid, 649 files, this agrees
    with parsing the files themselves on every file)."""
    if language_name(path) == "python":
        if not all(c.kind == "window" for c in file_chunks):
            return False
        import ast
        try:
            ast.parse(_reassemble(file_chunks, split_lines, late=False))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return True
        return False
    spec = language_for(path)

    def bad(text: str) -> bool:
        source = re.sub(r"\r(?!\n)", "\n", text).encode("utf-8", "surrogatepass")
        if not _parse(spec.grammar, source).root_node.has_error:
            return False
        return spec.alternate is None \
            or _parse(spec.alternate.grammar, source).root_node.has_error

    if all(c.kind == "window" for c in file_chunks):  # exact: windows are consecutive lines
        return bad(_reassemble(file_chunks, split_lines, late=False))
    module = [c for c in file_chunks if c.kind == "module"]
    symbols = [c for c in file_chunks if c.kind != "module"]
    if not (bad(_reassemble(module, split_lines, late=False))
            or bad(_reassemble(symbols, split_lines, late=False))):
        return False
    return all(bad(_reassemble(file_chunks, split_lines, late=late))
               for late in (False, True, "depth"))


#: How many files with parse errors :func:`describe_languages` names per language.
ERROR_FILES_NAMED = 3


def language_stats(chunks: Iterable) -> dict[str, float | int | str]:
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
    * ``lang/L/files_with_errors``: files whose text the language's parser does not read
      cleanly (tree-sitter error or missing nodes, a Python syntax error; see
      :func:`_has_errors`): their symbols may be incomplete (what :func:`outline` could not
      recover is in ``<module>``) or they are windows; and ``parse_errors/L``, a string
      naming the first :data:`ERROR_FILES_NAMED` of them in path order (only when there is
      one; not under ``lang/``, whose values are numbers);

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
    out: dict[str, float | int | str] = {}
    counts: dict[str, Counter] = defaultdict(Counter)
    error_files: dict[str, list[str]] = defaultdict(list)
    for path, file_chunks in sorted(by_file.items()):
        lang = language_name(path)
        stat = counts[lang]
        stat["chunks"] += len(file_chunks)
        windowed = all(c.kind == "window" for c in file_chunks)
        stat["files_windowed" if windowed else "files_symbol"] += 1
        if _has_errors(path, file_chunks, split_lines):
            stat["files_with_errors"] += 1
            error_files[lang].append(path)
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
        out[f"lang/{lang}/files_with_errors"] = stat["files_with_errors"]
        if error_files[lang]:
            out[f"parse_errors/{lang}"] = ", ".join(error_files[lang][:ERROR_FILES_NAMED])
        total += stat["lines"]
        symbol += stat["symbol_lines"]
    out["symbol_coverage"] = round(symbol / total, 4) if total else 0.0
    return out


def describe_languages(stats: dict) -> str | None:
    """One line for people from :func:`language_stats`' keys in an index's stats: chunks per
    language with its files chunked by symbol and in windows, and how many files have parse
    errors (naming up to :data:`ERROR_FILES_NAMED`), then the symbol coverage; None
    when the stats have no language key (an index built before they existed)."""
    langs = sorted({k.split("/")[1] for k in stats if k.startswith("lang/")})
    if not langs:
        return None

    def one(name: str) -> str:
        def g(f: str) -> int:
            return int(stats.get(f"lang/{name}/{f}", 0))
        errors = ""
        if g("files_with_errors"):
            named = stats.get(f"parse_errors/{name}", "")
            more = ", ..." if g("files_with_errors") > len(named.split(", ")) else ""
            errors = (f", {g('files_with_errors')} with parse errors"
                      + (f": {named}{more}" if named else ""))
        return (f"{name} {g('chunks')} chunks ({g('files_symbol')} files by symbol, "
                f"{g('files_windowed')} in windows{errors})")

    coded = sum(int(stats.get(f"lang/{n}/chunks", 0)) for n in langs)
    other = int(stats.get("chunks", coded)) - coded  # docs, config, data: no code language
    return ("languages: " + "; ".join(one(n) for n in langs)
            + (f"; other text (docs, config, data) {other} chunks" if other > 0 else "")
            + f"; symbol coverage {100 * float(stats.get('symbol_coverage', 0)):.1f}% of code lines")
