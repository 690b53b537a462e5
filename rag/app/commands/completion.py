"""``rag completion bash|zsh``: a shell completion script for the whole ``rag`` parser (shtab)."""

from __future__ import annotations

from rag.app.commands import no_rest

NAME, ORDER = "completion", 70
SHELLS = ("bash", "zsh")


def add_parser(sub):
    p = sub.add_parser(
        "completion", help="print a shell completion script: rag completion bash|zsh",
        description="Print a completion script for the rag command (made with shtab). bash: "
                    "`rag completion bash > ~/.local/share/bash-completion/completions/rag`; "
                    "zsh: `rag completion zsh > \"${fpath[1]}/_rag\"`.")
    p.add_argument("shell", choices=SHELLS)
    return p


def run(args, rest, parser) -> int:
    no_rest(rest, parser)
    import shtab

    from rag.app.cli import build_parser  # the whole command line, not this subcommand's

    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0
