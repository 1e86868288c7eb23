// Package harness runs agent protocol 3, the Term Challenge protocol
// (spec/term-challenge-protocol.md, compatible with Terminal-Bench's
// terminus-2 agents): the server is the harness. The user's message is
// the task. At each step the harness runs the agent command once, gives it
// the task and the current terminal screen on stdin, reads a JSON or XML
// response from its stdout, types the response's keystrokes into the
// terminal, waits each command's duration, and goes on with the new screen
// until the agent says task_complete twice in a row.
//
// Terminals ("target" in the config):
//
//   - "tmux": a shell in a tmux session of a private tmux server (its own
//     socket, -L termlink-<pid>-<n>, no config file), one session per chat
//     session. Key names go to send-keys, text to send-keys -l.
//   - "pty": a shell in a pseudo-terminal (github.com/creack/pty), the
//     screen kept by the VT100 model in package vt. Used as well when the
//     target is tmux and tmux is not installed.
//   - "serial:PATH@BAUD": a device's serial console (go.bug.st/serial),
//     shared by all sessions; keys are sent as the bytes a terminal sends
//     (C-c 0x03, Enter "\r", Up ESC [ A, ...), and the screen is the last
//     screenful the board printed, through the same VT100 model.
//
// Each session has a work directory, {workspace}/harness/<session>, where
// its shell starts and its agent runs; it and the session's terminal
// survive between messages, so the next task of a session continues in the
// same shell. A terminal unused for Options.IdleTimeout is torn down.
//
// The response parsers (Parse, ParseJSON, ParseXML) are as tolerant as
// terminus-2's: text around the response, a missing closing brace or
// </response>, a missing or invalid duration and unknown fields are
// warnings; a missing analysis, plan or commands, commands that are not a
// list and a command without keystrokes are errors. On errors nothing is
// typed and the agent is asked again with them; warnings are shown to the
// agent with the next terminal state.
//
// See README.md in this directory for agent authors.
package harness
