"""``rag serve``: POST /search and GET /health over HTTP (rag/app/serve/), for the configured
host names only (rag/app/serve/hosts.py)."""

from __future__ import annotations

from rag.app.commands import no_rest

NAME, ORDER = "serve", 60


def add_parser(sub):
    from rag.app.serve.hosts import LOOPBACK_HOSTS

    p = sub.add_parser("serve", help="serve POST /search and GET /health over HTTP")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-body-bytes", default=None, metavar="N",
                   help="answer 413 to a request body over N bytes (default: "
                        "RAG_MAX_BODY_BYTES, else 65536)")
    p.add_argument("--batch-wait-ms", default=None, metavar="MS",
                   help="wait up to MS for concurrent queries to embed together (default: "
                        "RAG_BATCH_WAIT_MS, else 5)")
    p.add_argument("--max-batch", default=None, metavar="N",
                   help="embed at most N concurrent queries in one batch; 1: no batching "
                        "(default: RAG_MAX_BATCH, else 16)")
    p.add_argument("--log-key-file", default=None, metavar="FILE",
                   help="a secret key (>= 32 bytes) for the log lines' correlation_id, "
                        "an HMAC-SHA256 of the query; re-read when the file changes "
                        "(rotation). Default: RAG_LOG_HMAC_KEY_FILE, else "
                        "RAG_LOG_HMAC_KEY, else no correlation id")
    p.add_argument("--allowed-hosts", default=None, metavar="HOSTS",
                   help="answer only requests whose Host header names one of these "
                        "(comma-separated; * for any); others get 400. Default: "
                        f"RAG_ALLOWED_HOSTS, else {','.join(LOOPBACK_HOSTS)} and the --host "
                        "address")
    p.add_argument("--allowed-origins", default=None, metavar="ORIGINS",
                   help="browser origins (scheme://host[:port], comma-separated, or *) "
                        "answered with CORS headers; a request from any other Origin gets "
                        "403 unless it is a GET. Default: RAG_ALLOWED_ORIGINS, else none")
    p.add_argument("--reload-s", default=None, metavar="S",
                   help="check for a newly published build every S seconds and swap it in "
                        "without a restart (0: only on SIGHUP; default: RAG_RELOAD_S, else 5)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides (the RAG_* environment flags also apply)")
    return p


def run(args, rest, parser) -> int:
    no_rest(rest, parser)
    from rag.app.serve.app import serve

    return serve(args.host, args.port, list(args.overrides), body_limit=args.max_body_bytes,
                 batch_wait_ms=args.batch_wait_ms, max_batch=args.max_batch,
                 log_key_file=args.log_key_file, allowed_hosts=args.allowed_hosts,
                 allowed_origins=args.allowed_origins, reload_s=args.reload_s)
