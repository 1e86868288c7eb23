package server

// TLSEnabled reports whether the server serves TLS.
func (s *Server) TLSEnabled() bool { return s.tls != nil }

// ReloadTLS reads the certificate and key files again and, when they load,
// uses them for every new connection; open connections keep theirs
// (tlsconf.TLS.Reload). When they do not load, the current certificate
// stays and the error says why.
func (s *Server) ReloadTLS() error { return s.tls.Reload(s.log) }
