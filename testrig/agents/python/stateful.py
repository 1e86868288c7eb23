#!/usr/bin/env python3
"""Agent that remembers user preferences and tracks history."""
import json, sys
from pathlib import Path

envelope = json.loads(sys.stdin.readline())
text = envelope["text"]
user_dir = Path(envelope["user_data_dir"])  # e.g. /workspace/users/123456789/

# Load user state (or create defaults)
state_file = user_dir / "state.json"
if state_file.exists():
    state = json.loads(state_file.read_text())
else:
    state = {"message_count": 0, "preferences": {}}

state["message_count"] += 1

# ... do work with the user's message ...

# Save updated state
state_file.write_text(json.dumps(state, indent=2))

print(json.dumps({
    "type": "message",
    "text": f"Got it! (message #{state['message_count']})"
}), flush=True)
