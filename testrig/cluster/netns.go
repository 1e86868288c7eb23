package cluster

// inNetns returns argv run inside the network namespace ns (ip netns
// exec NS argv...: ip execs the command, so the process is the node's
// own and a kill reaches it), or argv itself when ns is "".
func inNetns(ns string, argv ...string) []string {
	if ns == "" {
		return argv
	}
	return append([]string{"ip", "netns", "exec", ns}, argv...)
}
