"""Sentence embeddings for the knowledge store: the bundled offline MiniLM (`local`) or an OpenAI-compatible
endpoint (`remote`), chosen from the settings by `factory.build_embedder`. Import from the submodule: the
package imports nothing, so a process that embeds locally never loads the model SDK."""
