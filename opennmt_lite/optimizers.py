"""The optimizer from the config's `params`, and names for its state.

OpenNMT-tf's Transformer recipe uses LazyAdam (TensorFlow Addons), which Keras 3 does not have.
LazyAdam differs from Adam only for sparse (IndexedSlices) gradients, updating the moments of
the looked-up embedding rows alone; OpenNMT-tf accumulates gradients into dense tensors before
applying them, so its LazyAdam always took the dense path, i.e. computed exactly Adam. We
therefore use keras.optimizers.Adam with the same hyper-parameters (epsilon 1e-7 as in Keras 2).
"""

import keras

from opennmt_lite.schedules import make_learning_rate

ADAM_KEYS = {"beta_1", "beta_2", "epsilon", "amsgrad", "clipnorm", "global_clipnorm", "clipvalue"}


def make_optimizer(params, mixed_precision="false"):
    """keras optimizer for `params`; wrapped in a dynamic LossScaleOptimizer for float16."""
    name = params["optimizer"]
    kwargs = dict(params.get("optimizer_params") or {})
    learning_rate = make_learning_rate(params)
    allowed = ADAM_KEYS | ({"weight_decay"} if name == "AdamW" else set())
    if name == "SGD":
        allowed = {"momentum", "nesterov", "clipnorm", "global_clipnorm", "clipvalue"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(f"params.optimizer_params: unknown keys for {name}: {unknown}")
    if name in ("Adam", "LazyAdam"):
        kwargs.setdefault("epsilon", 1e-7)
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate, **kwargs)
    elif name == "AdamW":
        kwargs.setdefault("epsilon", 1e-7)
        optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, **kwargs)
    else:
        optimizer = keras.optimizers.SGD(learning_rate=learning_rate, **kwargs)
    if mixed_precision in ("true", "float16"):
        # Initial scale 2**15 and growth every 2000 finite steps, like TensorFlow's default.
        optimizer = keras.optimizers.LossScaleOptimizer(
            optimizer, initial_scale=2.0**15, dynamic_growth_steps=2000
        )
    return optimizer


def inner_optimizer(optimizer):
    return getattr(optimizer, "inner_optimizer", optimizer)


def optimizer_state(optimizer, named_trainable):
    """{name: variable} of the optimizer's state, slots named after the model variable paths:
    `iterations`, `m/<path>`, `v/<path>` (Adam), `momentum/<path>` (SGD), and `loss_scale`,
    `loss_scale_steps` for a LossScaleOptimizer. The optimizer must be built.
    """
    inner = inner_optimizer(optimizer)
    state = {"iterations": inner.iterations}
    if inner is not optimizer:
        state["loss_scale"] = optimizer.dynamic_scale
        state["loss_scale_steps"] = optimizer.step_counter
        # the wrapper's own step counter (Keras keeps one; the inner optimizer's is the real one)
        state["loss_scale_optimizer_iterations"] = optimizer._iterations
    # Keras keeps slots in lists aligned with the variables given to build().
    slot_lists = {
        "m": getattr(inner, "_momentums", None),
        "v": getattr(inner, "_velocities", None),
    }
    if isinstance(inner, keras.optimizers.SGD):
        slot_lists = {"momentum": getattr(inner, "_momentums", None) or None}
    for slot, variables in slot_lists.items():
        if not variables:
            continue
        for path, variable in named_trainable.items():
            state[f"{slot}/{path}"] = variables[inner._get_variable_index(variable)]
    # Everything the optimizer owns must be named (the learning rate variable Keras keeps for a
    # schedule is recomputed from the step at every update and need not be saved).
    named = {id(v) for v in state.values()}
    missing = [v.path for v in optimizer.variables if id(v) not in named and "learning_rate" not in v.path]
    if missing:
        raise RuntimeError(f"optimizer variables without a checkpoint name: {missing}")
    return state
