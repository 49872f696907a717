"""Process sandbox for generated code and the token-gated tool bridge it calls tools through.

Kept empty on purpose: workflows import the sandbox's contract (`bamboo.sandbox.contract`) and must not
load the runner, which starts processes, with it."""
