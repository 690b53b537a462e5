import pickle, numpy as np
from rag.eval.abstention import fit_learned_gate, choose_threshold
D=pickle.load(open('/tmp/proto/cooc.pkl','rb'))
IDX={'tc':2,'cooc':3,'fcooc':4,'td':5}
def X(rows,feats): return np.array([[r[IDX[f]] for f in feats] for r in rows])
for feats in (['td','tc'],['td','tc','cooc'],['td','cooc']):
    line=[]
    for held in D:
        tr=[r for k in D if k!=held for r in D[k]]
        y=np.array([r[0] for r in tr]).astype(int)
        g,oof,_=fit_learned_gate({f:X(tr,feats)[:,i] for i,f in enumerate(feats)}, y)
        t,_,_=choose_threshold(oof[y==1],oof[y==0],target=0.10)
        rows=D[held]; yy=np.array([r[0] for r in rows]); s=np.array([g.probability(dict(zip(feats,x))) for x in X(rows,feats)])
        sp=[si for r,si in zip(rows,s) if r[1]=='near_miss_present']
        line.append('%s %.2f/%.2f%s'%(held,(s[~yy]<t).mean(),(s[yy]<t).mean(), (' nmp %d/%d'%(sum(x<t for x in sp),len(sp)) if sp else '')))
    print('+'.join(feats).ljust(12),' | '.join(line))
