from pathlib import Path
import re, jieba, sys, json
jieba.setLogLevel(60)
ROOT = str(Path(__file__).resolve().parent / "out" / "fastapi-zh-docs") + "/"  # bench/docs_set.py --set fastapi-zh
STOP = set("的 了 是 在 我 我们 你 您 他 它 怎么 怎样 如何 什么 哪些 哪个 哪儿 哪里 可以 吗 呢 吧 啊 和 与 或 或者 把 被 让 要 会 能 能不能 一个 这个 那个 这些 那些 这种 这样 那样 就 都 也 还 又 再 不 没 没有 有 有没有 很 太 给 对 从 到 为 为了 以 用 着 过 上 下 里 中 后 前 时 时候 之 等 等等 及 而 但 但是 如果 因为 所以 然后 还是 就是 只 该 应该 需要 这 那 其 个 种 些 么 么样 吗 嘛 呀 得 地 之后 以后 一下 一些 一起 自己 多 少 想 办法 请问 是否 已经 比如 例如 即使 并 并且 其他 其它 不是 需 要是 不想 怎么办 为什么 多少 几".split())
def words(text):
    out=set()
    for w in jieba.lcut(text):
        w=w.strip().lower()
        if len(w)<2: continue
        if w in STOP: continue
        if not re.search(r'[\u4e00-\u9fff]|[a-z]', w): continue
        out.add(w)
    return out
def section(doc, evidence):
    text=open(ROOT+doc,encoding='utf-8').read()
    i=text.index(evidence)
    # heading section: from previous heading line to next heading line
    lines=text.split('\n')
    pos=0; idx=0
    for k,l in enumerate(lines):
        if pos+len(l)>=i: idx=k; break
        pos+=len(l)+1
    s=idx
    while s>0 and not lines[s].startswith('#'): s-=1
    e=idx+1
    while e<len(lines) and not lines[e].startswith('#'): e+=1
    sec='\n'.join(l for l in lines[s:e] if not l.strip().startswith('{!'))
    return sec
def overlap(q, doc, evidence):
    sec=section(doc,evidence)
    return sorted(words(q)&words(sec)), len(sec)
if __name__=="__main__":
    q, doc, ev = sys.argv[1:4]
    print(overlap(q,doc,ev), sorted(words(q)))
