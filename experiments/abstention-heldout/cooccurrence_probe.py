import csv, glob, math, sys, collections, numpy as np, time
from pathlib import Path
from rag.index.build import build_index
from rag.search.term_coverage import TermCoverage, _stemmer, common_words, COMMON_WEIGHT
from sklearn.metrics import roc_auc_score
H=Path.home()/'.cache/rag'
C={'flask':(H/'corpora/flask-3.1.3/flask-3.1.3','/work/main/mlartifacts/*/a8e0bced*/artifacts/per_query.csv'),
   'zod':(H/'corpora/npm-zod-3.25.76/package','/work/main/mlartifacts/*/1af553f2*/artifacts/per_query.csv'),
   'itsd':(H/'corpora/itsdangerous-2.2.0/itsdangerous-2.2.0','/work/main/mlartifacts/*/7739751e*/artifacts/per_query.csv'),
   'chi':(H/'datasets/semble-chi-semble-5ad917cde1779770/corpus','/tmp/heldout/out/mlartifacts/*/78113788*/artifacts/per_query.csv'),
   'sinatra':(H/'datasets/semble-sinatra-semble-ee4f166f6a7fa323/corpus','/tmp/heldout/out/mlartifacts/*/ed4201fb*/artifacts/per_query.csv'),
   'gson':(H/'datasets/semble-gson-semble-564a7e490741c5c1/corpus','/tmp/heldout/out/mlartifacts/*/233b5eb3*/artifacts/per_query.csv')}
st=_stemmer(); common=common_words()
out={}
for name,(root,pq) in C.items():
    t=time.time()
    idx=build_index(root, embedder=None, cache_dir=Path('/tmp/proto/cache'), progress=False)
    sc=idx.bm25.scorer; n=len(idx.chunks)
    vocab=sc._vocab; indptr=sc._indptr; indices=sc._indices
    stems=collections.defaultdict(list)
    for tok,s in zip(vocab, st.stemWords(list(vocab))): stems[s].append(tok)
    tc=TermCoverage(doc_freqs=sc.term_doc_freqs(), n_docs=n, tokenize=idx.bm25.tokens)
    paths=np.array([c.path for c in idx.chunks])
    R=list(csv.DictReader(open(glob.glob(pq)[0])))
    rows=[]
    for r in R:
        terms=tc.terms(r['query'])
        if not terms: continue
        w={}; holders={}
        for term,s in zip(terms, st.stemWords(terms)):
            toks=set(stems.get(s,[]))|({term} if term in vocab else set())
            ch=set()
            for tk in toks:
                tid=vocab[tk]; ch.update(indices[indptr[tid]:indptr[tid+1]].tolist())
            df=len(ch)
            wt=math.log(1+n/(df+0.5))
            if df==0 and term in common: wt*=COMMON_WEIGHT
            w[term]=wt; holders[term]=ch
        tot=sum(w.values())
        score=collections.Counter(); fscore=collections.defaultdict(set)
        for term,ch in holders.items():
            for c in ch: score[c]+=w[term]; fscore[paths[c]].add(term)
        best=max(score.values())/tot if score else 0.0
        bestf=max((sum(w[t] for t in ts) for ts in fscore.values()), default=0.0)/tot
        cov=sum(w[t] for t in terms if holders[t])/tot
        rows.append((r['kind']=='positive', r['tags'], cov, best, bestf, float(r['top_dense'])))
    out[name]=rows
    y=np.array([x[0] for x in rows])
    aucs=[roc_auc_score(y,[x[i] for x in rows]) for i in (2,3,4,5)]
    print('%-8s n=%d chunks=%d  AUC cov %.3f chunk_cooc %.3f file_cooc %.3f top_dense %.3f  (%.0fs)'%(name,len(rows),n,*aucs,time.time()-t))
    if name in ('chi','sinatra','gson'):
        for tag in ('near_miss_present','near_miss_absent','off_topic'):
            sel=[x for x in rows if x[1]==tag]
            pos=[x for x in rows if x[0]]
            if sel: print('   %s: chunk_cooc neg median %.2f  pos median %.2f | file_cooc neg %.2f pos %.2f'%(tag,np.median([x[3] for x in sel]),np.median([x[3] for x in pos]),np.median([x[4] for x in sel]),np.median([x[4] for x in pos])))
import pickle; pickle.dump(out,open('/tmp/proto/cooc.pkl','wb'))
