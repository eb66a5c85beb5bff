"""The transformer and everything that describes or stores it.

    config.py       ModelConfig: the Hugging Face config.json fields the model uses
    transformer.py  init_params, forward, forward_cached (KV cache), param_shapes
    attention.py    attention: reference, blockwise (O(T) memory), XLA and cuDNN dot-product
    checkpoint.py   load_model / save_model: Hugging Face model directories (safetensors)
    tokenizer.py    Tokenizer: a `tokenizers` backend with the special-token and chat rules
    sharding.py     device meshes, FSDP parameter shardings, multi-process helpers
"""
