"""``python -m rag.bench`` (see :mod:`rag.bench`)."""

from rag.bench import main

raise SystemExit(main())
