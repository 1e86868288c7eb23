#!/usr/bin/env python3
"""Minimal nanobot terminal micro-agent."""
import json, sys, time

# Read input envelope from stdin
envelope = json.loads(sys.stdin.readline())
user_text = envelope["text"]
media = envelope.get("media", [])

# Send a progress update
print(json.dumps({"type": "progress", "text": "Thinking..."}), flush=True)
time.sleep(1)  # the work a real agent does here (calling a model) takes a while

# Send the response
print(json.dumps({"type": "message", "text": f"You said: {user_text}"}), flush=True)
