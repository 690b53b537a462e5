"""``python -m rag`` is the ``rag`` command."""

from rag.app.cli import main

raise SystemExit(main())
