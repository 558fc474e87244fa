"""Edits to a YAML file that keep its layout: a ruamel.yaml round trip with the file's own
indentation, and values set in place, so a file written back differs from the one read only
where a value changed (or a key was added). ``contract.file`` writes calibrations with it."""

from __future__ import annotations


def round_trip():
    """A ruamel.yaml round trip that changes nothing it is not asked to: quotes kept, no line
    rewrapped, null written as ``null`` (as ``contract init`` writes it)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 2**31 - 1
    yaml.preserve_quotes = True
    yaml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def layout(data) -> dict:
    """The file's own indentation, for ruamel's ``indent()``: the most common step of a block
    mapping nested in another, and of a block sequence under a key: its dash's offset from the key
    and its items' indent (ruamel.yaml.util.load_yaml_guess_indent takes the first it meets and
    one step for both). A file without one: what ``contract init`` writes (2, dash at the key)."""
    from collections import Counter

    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    maps, offsets, seqs = Counter(), Counter(), Counter()

    def walk(node):
        if isinstance(node, CommentedMap):
            for key, value in node.items():
                if isinstance(value, (CommentedMap, CommentedSeq)) and value and not value.fa.flow_style() \
                        and key in node.lc.data:
                    col = node.lc.data[key][1]
                    if isinstance(value, CommentedMap):
                        maps[value.lc.col - col] += 1
                    else:
                        offsets[value.lc.col - col] += 1
                        seqs[value.lc.data[0][1] - col] += 1
                walk(value)
        elif isinstance(node, CommentedSeq):
            for value in node:
                walk(value)

    walk(data)
    mapping = maps.most_common(1)[0][0] if maps else 2
    offset = offsets.most_common(1)[0][0] if offsets else max(0, mapping - 2)
    sequence = seqs.most_common(1)[0][0] if seqs else offset + 2
    return {"mapping": mapping, "sequence": max(sequence, offset + 2), "offset": offset}


_MISSING = object()


def set_value(node, key, value) -> None:
    """``node[key] = value`` (a mapping's key, or a sequence's index; ``len(node)`` appends),
    changing only what differs: a mapping or sequence already there is updated in place, key by
    key (its comments, flow or block style and order kept; keys ``value`` lacks removed); a scalar
    equal to the one written is left as written (``0.20`` stays); a new string keeps the old one's
    quotes; a new key goes at the end, after the last line's comment."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    old = node.get(key, _MISSING) if isinstance(node, CommentedMap) else node[key] if key < len(node) else _MISSING
    if isinstance(value, dict) and isinstance(old, CommentedMap) and old:  # (an empty one: written anew)
        if old is not value:
            for k in [k for k in old if k not in value]:
                _remove(old, k)
            for k, v in value.items():
                set_value(old, k, v)
    elif isinstance(value, list) and isinstance(old, CommentedSeq) and old:
        if old is not value:
            while len(old) > len(value):
                _remove(old, len(old) - 1)
            for i, v in enumerate(value):
                set_value(old, i, v)
    elif old is _MISSING:
        _append(node, key, commented(value))
    elif not _same(old, value):
        node[key] = _styled(value, old)


def set_items(seq, items: list) -> None:
    """Make ``seq`` hold ``items`` (its own elements, some dropped, new ones among them) in order,
    keeping the elements it holds (or equal ones), with their comments."""
    free, mapped = list(seq), []
    for item in items:
        mine = next((f for f in free if f is item), None)
        if mine is None:
            mine = next((f for f in free if _plain_of(f) == _plain_of(item)), item)
        free = [f for f in free if f is not mine]
        mapped.append(mine)
    items, keep = mapped, {id(item) for item in mapped}
    for i in reversed([i for i, item in enumerate(seq) if id(item) not in keep]):
        _remove(seq, i)
    for i, item in enumerate(items):
        if i >= len(seq):
            _append(seq, i, commented(item))
        elif seq[i] is not item:
            seq.insert(i, commented(item))


def _same(old, new) -> bool:
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool) and old == new
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return float(old) == float(new)
    if isinstance(old, str) and isinstance(new, str):
        return str(old) == new
    return old is None and new is None


def _styled(value, old):
    from ruamel.yaml.scalarstring import ScalarString

    if isinstance(value, str) and isinstance(old, ScalarString) and "\n" not in value:
        return type(old)(value)  # quoted as it was
    return commented(value)


def commented(value):
    """Plain mappings and lists as ruamel's (so a comment can be attached), block style."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, (CommentedMap, CommentedSeq)):
        return value
    if isinstance(value, dict):
        return CommentedMap((k, commented(v)) for k, v in value.items())
    if isinstance(value, list):
        return CommentedSeq(commented(v) for v in value)
    return value


def _append(node, key, value) -> None:
    """Add a key (or an item) at the end of a mapping (sequence). What followed the old last line
    (blank lines, the comment above the next section) follows the new one."""
    from ruamel.yaml.comments import CommentedSeq

    after = _take_after(node)
    if isinstance(node, CommentedSeq):
        node.append(value)
    else:
        node[key] = value
    if after:
        _give_after(node, after)


def _remove(node, key) -> None:
    """Remove a key (or an item); what followed it, when it was the last, follows the new last."""
    last = key == (len(node) - 1 if isinstance(node, list) else list(node)[-1])
    after = _take_after(node) if last else ""
    del node[key]
    if after and len(node):
        _give_after(node, after)


def _tail(node):
    """(comment slots, index) of the comment token after a block collection's last line, or None."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if not isinstance(node, (CommentedMap, CommentedSeq)) or not node or node.fa.flow_style():
        return None
    last = len(node) - 1 if isinstance(node, CommentedSeq) else list(node)[-1]
    inner = _tail(node[last])
    if inner is not None:
        return inner
    if getattr(node.ca, "end", None):
        return node.ca.end, None
    slots = node.ca.items.get(last)
    slot = 0 if isinstance(node, CommentedSeq) else 2
    return (slots, slot) if slots and slots[slot] is not None else None


def _take_after(node) -> str:
    """Detach the lines after a collection's last line (its end-of-line comment stays): their text."""
    tail = _tail(node)
    if tail is None:
        return ""
    slots, slot = tail
    if slot is None:  # a sequence's end: lines after it
        text = "".join(t.value for t in slots)
        slots.clear()
        return text
    head, _, rest = slots[slot].value.partition("\n")
    slots[slot].value = head + "\n"
    return rest


def _give_after(node, text: str) -> None:
    """Attach lines after a collection's last line (after its end-of-line comment, if any)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    while True:
        last = len(node) - 1 if isinstance(node, CommentedSeq) else list(node)[-1]
        value = node[last]
        if isinstance(value, (CommentedMap, CommentedSeq)) and value and not value.fa.flow_style():
            node = value
            continue
        slot = 0 if isinstance(node, CommentedSeq) else 2
        slots = node.ca.items.setdefault(last, [None, None] if isinstance(node, CommentedSeq) else [None] * 4)
        if slots[slot] is None:
            slots[slot] = CommentToken("\n" + text, CommentMark(0))
        else:
            slots[slot].value = slots[slot].value.rstrip("\n") + "\n" + text
        return


def _plain_of(value):
    if isinstance(value, dict):
        return {k: _plain_of(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_of(v) for v in value]
    return value
