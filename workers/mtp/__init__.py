"""MTP (multi-token prediction) heads: model code and loaders, one module per checkpoint layout.

`qwen35` is the Hugging Face Qwen3.5 / Qwen3-Next layout (`mtp.fc`, `mtp.pre_fc_norm_*`,
`mtp.layers.N.*`, `mtp.norm`). A DeepSeek-V3 layout (`model.layers.{n}.eh_proj/enorm/hnorm/
shared_head`) would be a sibling module exposing the same `MTPHead.step` signature, picked by
`loader.load_mtp_head` from config.json.
"""
