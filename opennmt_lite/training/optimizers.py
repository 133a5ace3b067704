"""Names for an optimizer's state (the optimizer itself is built by `opennmt_lite.build.optimizer`)."""

import keras


def inner_optimizer(optimizer):
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
