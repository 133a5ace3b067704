"""Names for every variable of a layer tree, from the attribute path that reaches it.

Keras 3 names variables after layer *names* (`self_attention_encoder/layer_0/...`) and can keep
sub-layers in wrapped lists that `tf.train.Checkpoint` does not see. Walking the public
attributes instead gives names that mirror OpenNMT-tf's checkpoint paths
(`layers/0/self_attention/layer/linear_queries/kernel`), and `named_variables` checks that the
walk found every variable Keras knows of, so nothing can hide from a checkpoint.
"""

import keras


def _walk(obj, path, found, seen):
    if isinstance(obj, keras.Variable):
        if id(obj) not in seen:  # a shared variable keeps its first path
            seen.add(id(obj))
            found[path] = obj
        return
    if isinstance(obj, keras.random.SeedGenerator):
        _walk(obj.state, f"{path}/state", found, seen)
        return
    if isinstance(obj, (list, tuple)):
        for index, item in enumerate(obj):
            _walk(item, f"{path}/{index}" if path else str(index), found, seen)
        return
    if isinstance(obj, keras.layers.Layer):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        for name, value in vars(obj).items():
            if not name.startswith("_"):
                _walk(value, f"{path}/{name}" if path else name, found, seen)


def named_variables(root, include_seeds=True):
    """{attribute path: variable} for every variable of `root` (a built Keras layer).

    Raises if Keras lists a variable that the attribute walk cannot reach.
    """
    found = {}
    _walk(root, "", found, set())
    reachable = {id(v) for v in found.values()}
    hidden = [v.path for v in root.variables if id(v) not in reachable]
    if hidden:
        raise RuntimeError(f"variables not reachable through public attributes: {hidden}")
    if not include_seeds:
        weights = {id(v) for v in root.weights}
        found = {name: v for name, v in found.items() if id(v) in weights}
    return found


def nested(named):
    """{"a/b/c": v} -> {"a": {"b": {"c": v}}}: the tree `tf.train.Checkpoint` saves as `a/b/c`."""
    root = {}
    for path, value in named.items():
        *parents, leaf = path.split("/")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return root
