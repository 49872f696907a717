"""Chat-model access: a structured-output client (`client`), error classification (`errors`), JSON schemas
for structured output (`schema`) and the offline local server (`local`). Import from the submodule: the
package imports nothing, so a process that needs only the error types does not load the model SDK."""
