"""Services behind the Investigation workflow: procedures and grants, procedure tools, the LLM steps of a
turn, finalize, and the client every frontend (CLI, UI, bot) uses to talk to a session."""
