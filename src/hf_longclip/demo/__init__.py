"""`hf-longclip demo`: long-caption retrieval and grounding in a Gradio app (docs/demo.md).

`index` (image folders, the on-disk embedding cache, faiss search) needs no gradio; `app` builds the interface and
needs the optional extra `hf-longclip[demo]`; `space` writes a Hugging Face Space that runs the same app."""
