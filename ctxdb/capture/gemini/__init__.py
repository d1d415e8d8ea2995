"""Gemini CLI capture: an importer of its chat sessions (`~/.gemini/tmp/<project>/chats/`) and a
hook that imports the session it is called for (docs/capture.md#gemini-cli)."""
