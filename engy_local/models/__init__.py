"""The model store: the catalog (`models.toml`), the store directory and its
manifests, pulling and downloading files, the Hugging Face cache, listing
what is installed, and the GGUF header reader they share."""
