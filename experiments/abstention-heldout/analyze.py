import csv, glob, collections, sys
for repo in ["chi", "sinatra", "gson"]:
    f = glob.glob(f"/tmp/heldout/out/mlartifacts/rag-semble-{repo}/*/artifacts/per_query.csv")
    assert len(f) == 1, f
    rows = list(csv.DictReader(open(f[0])))
    print(f"===== {repo}  ({f[0]})")
    kinds = collections.Counter(r["kind"] for r in rows); print("kinds:", dict(kinds))
    print("returned_as values:", dict(collections.Counter((r["kind"], r["returned_as"], r["dropped"], r["weak_match"], r["abstained"]) for r in rows)))
    neg = [r for r in rows if r["kind"] != "positive"]
    pos = [r for r in rows if r["kind"] == "positive"]
    def abst(r):
        return r["abstained"].lower() in ("true", "1", "1.0")
    by = collections.defaultdict(list)
    for r in neg:
        by[r["tags"]].append(r)
    for t, rs in sorted(by.items()):
        a = sum(abst(r) for r in rs)
        print(f"  tag {t}: abstained {a}/{len(rs)} = {a/len(rs):.3f}")
    a = sum(abst(r) for r in neg); print(f"  all negatives: {a}/{len(neg)} = {a/len(neg):.3f}")
    print("  positives:", len(pos))
    flagged = [r for r in pos if r["returned_as"] in ("weak", "dropped")]
    print("  flagged positives:")
    for r in flagged:
        print(f"    [{r['query_id']}] {r['query']!r} returned_as={r['returned_as']} weak_match={r['weak_match']} dropped={r['dropped']} term_coverage={r['term_coverage']} top_dense={r['top_dense']} gate_score={r['gate_score']} reason={r['reason']}")
    print("  negatives NOT abstained:")
    for r in neg:
        if not abst(r):
            print(f"    [{r['query_id']}] {r['query']!r} tag={r['tags']} returned_as={r['returned_as']} term_coverage={r['term_coverage']} top_dense={r['top_dense']} gate_score={r['gate_score']}")
