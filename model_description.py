"""OpenNMT-tf 2.32 custom model file of the "onmt_tf_guided" fixture.

Used as: onmt-main --model model.py --config config.yml ...
"""

import opennmt


def model():
    return opennmt.models.Transformer(
        num_layers=2,
        num_units=32,
        num_heads=2,
        ffn_inner_dim=64,
        dropout=0.1,
        attention_dropout=0.1,
        ffn_dropout=0.1,
        position_encoder_class=None,
        maximum_relative_position=8,
        pre_norm=True,
    )
