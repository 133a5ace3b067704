"""Checkpoint names: for every variable of a layer tree, from the attribute path that reaches
it, and for an optimizer's state, after the model variables its slots belong to.

Keras 3 names variables after layer *names* (`self_attention_encoder/layer_0/...`) and can keep
sub-layers in wrapped lists that `tf.train.Checkpoint` does not see. Walking the public
attributes instead gives names that mirror OpenNMT-tf's checkpoint paths
(`layers/0/self_attention/layer/linear_queries/kernel`), and `named_variables` checks that the
walk found every variable Keras knows of, so nothing can hide from a checkpoint. The optimizer
itself is built by `opennmt_lite.build.optimizer`.
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


def named_trainable(model):
    """{attribute path: variable} of the trainable weights of `model`: those an optimizer keeps
    slots for."""
    return {path: v for path, v in named_variables(model, include_seeds=False).items() if v.trainable}


def inner_optimizer(optimizer):
    """The optimizer that owns the step and the slots (a LossScaleOptimizer wraps one)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def optimizer_state(optimizer, named_trainable):
    """{name: variable} of the optimizer's state, slots named after the model variable paths:
    `iterations`, `m/<path>`, `v/<path>` (and `vhat/<path>` with amsgrad) for Adam and AdamW,
    `momentum/<path>` for SGD with momentum, and for a LossScaleOptimizer `loss_scale`,
    `loss_scale_steps` and `loss_scale_optimizer_iterations`. The optimizer must be built.
    Raises if the optimizer owns a variable left without a name (it would not be saved).
    """
    inner = inner_optimizer(optimizer)
    state = {"iterations": inner.iterations}
    if inner is not optimizer:
        state["loss_scale"] = optimizer.dynamic_scale
        state["loss_scale_steps"] = optimizer.step_counter
        # Keras gives every optimizer a step counter; the wrapper's own one is not the real step
        # (the inner optimizer's is) but is named too, so that a restore matches every variable.
        inner_ids = {id(v) for v in inner.variables}
        for v in optimizer.variables:
            if id(v) not in inner_ids and v.path.endswith("iteration"):
                state["loss_scale_optimizer_iterations"] = v
    for path, variable in named_trainable.items():
        for slot, slot_variable in slot_variables(inner, variable).items():
            state[f"{slot}/{path}"] = slot_variable
    # Everything else the optimizer owns must be named, except the learning rate variable Keras
    # keeps for a constant rate (or a LossScaleOptimizer's unused one): it comes from the config.
    named = {id(v) for v in state.values()}
    unnamed = [v.path for v in optimizer.variables if id(v) not in named and "learning_rate" not in v.path]
    if unnamed:
        raise RuntimeError(f"optimizer variables without a checkpoint name: {unnamed}")
    return state


def slot_variables(optimizer, variable):
    """{slot name: slot variable} that the (inner, unwrapped) `optimizer` keeps for the model
    `variable`: `m`, `v` (and `vhat` with amsgrad) for Adam and AdamW, `momentum` for SGD with
    momentum, nothing for plain SGD.

    Keras 3 has no public API for this, so this is the one place that reads Keras private
    attributes: the slot lists Adam fills in build() (`_momentums`, `_velocities`,
    `_velocity_hats`) and the index of a variable in them (`_get_variable_index`).
    tests/test_checkpoints.py fails if a Keras upgrade changes them.
    """
    if isinstance(optimizer, keras.optimizers.SGD):
        lists = {"momentum": optimizer.momentums}
    else:
        lists = {"m": getattr(optimizer, "_momentums", None),
                 "v": getattr(optimizer, "_velocities", None),
                 "vhat": getattr(optimizer, "_velocity_hats", None)}
    lists = {slot: variables for slot, variables in lists.items() if variables}
    if not lists:
        return {}
    index = optimizer._get_variable_index(variable)
    return {slot: variables[index] for slot, variables in lists.items()}
