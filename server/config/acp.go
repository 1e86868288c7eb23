package config

import "strings"

// Defaults of an acp agent block.
const (
	DefaultACPIdleTimeout  = 600
	DefaultACPMaxProcesses = 32
	DefaultACPStartTimeout = 30
	DefaultACPAskTimeout   = 60
	DefaultACPPermission   = ACPPermissionReject
)

// Values of NuumAgent.HeartbeatAck.
const (
	NuumHeartbeatAckRequired = "required"
	NuumHeartbeatAckOptional = "optional"
)

// Permission policies of an ACP agent (ACPAgent.Permission).
const (
	ACPPermissionReject    = "reject"     // every permission request is answered with a reject option
	ACPPermissionAllowOnce = "allow_once" // answered with the agent's allow_once option
	ACPPermissionAsk       = "ask"        // the device user chooses; no answer within askTimeout rejects
	// ACPPermissionDevice: a question with the request's own options on a
	// device that listed "choice" (one key answers); no answer within
	// askTimeout, or a device without "choice", gets PermissionFallback.
	ACPPermissionDevice = "device"
)

// ACPAgent is an agent speaking the Agent Client Protocol (ACP v1,
// JSON-RPC 2.0 over stdio): one long-lived process per session.
type ACPAgent struct {
	Command      string            // required; run as is with Args, or by sh -c when Args is empty
	Args         []string          // nil when absent
	Env          map[string]string // added to the agent's environment; nil when empty
	Cwd          string            // working directory and ACP session cwd; "" = the server workspace; relative to it otherwise
	IdleTimeout  int               // seconds; default 600
	MaxProcesses int               // default 32
	StartTimeout int               // seconds for initialize and session/new; default 30
	Permission   string            // "reject" (default), "allow_once" or "ask"
	AskTimeout   int               // seconds the device has to answer a permission question; default 60
	// PermissionFallback answers, under policy "device", a request the
	// device cannot be asked (no "choice") or did not answer in time:
	// "reject" (default) or "allow_once".
	PermissionFallback string
}

func (w *walker) acp(path string, n *node) *ACPAgent {
	a := &ACPAgent{
		IdleTimeout:  DefaultACPIdleTimeout,
		MaxProcesses: DefaultACPMaxProcesses,
		StartTimeout: DefaultACPStartTimeout,
		Permission:   DefaultACPPermission,
		AskTimeout:   DefaultACPAskTimeout,
		// PermissionFallback: "" until set, which is reject.
	}
	f := w.fields(path, n, "agents.*.acp")
	if f == nil {
		return a
	}
	if e, ok := f["command"]; ok {
		a.Command, _ = w.command(join(path, e.key), e.val)
	} else {
		w.required(path, "command", "a non-empty string")
	}
	if e, ok := f["args"]; ok {
		p := join(path, e.key)
		if e.val.kind != kArray {
			w.errorf(p, "must be an array of strings, got %s", e.val.kind)
		} else {
			for i, v := range e.val.elems {
				if s, good := w.str(index(p, i), v); good {
					if strings.ContainsRune(s, 0) {
						w.errorf(index(p, i), "must not contain a NUL byte")
					}
					a.Args = append(a.Args, s)
				}
			}
		}
	}
	if e, ok := f["env"]; ok {
		a.Env = w.env(join(path, e.key), e.val)
	}
	if e, ok := f["cwd"]; ok {
		a.Cwd, _ = w.command(join(path, e.key), e.val)
	}
	ints := []struct {
		key string
		dst *int
	}{
		{"idleTimeout", &a.IdleTimeout},
		{"maxProcesses", &a.MaxProcesses},
		{"startTimeout", &a.StartTimeout},
		{"askTimeout", &a.AskTimeout},
	}
	for _, in := range ints {
		if e, ok := f[in.key]; ok {
			*in.dst, _ = w.integer(join(path, e.key), e.val, 1, noMax)
		}
	}
	if e, ok := f["permission"]; ok {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			switch s {
			case ACPPermissionReject, ACPPermissionAllowOnce, ACPPermissionAsk, ACPPermissionDevice:
			default:
				w.errorf(p, `must be "reject", "allow_once", "ask" or "device", got %s`, quote(s))
			}
			a.Permission = s
		}
	}
	if e, ok := f["permissionFallback"]; ok {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			switch s {
			case ACPPermissionReject, ACPPermissionAllowOnce:
			default:
				w.errorf(p, `must be "reject" or "allow_once", got %s`, quote(s))
			}
			a.PermissionFallback = s
		}
	}
	return a
}
