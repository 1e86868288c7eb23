// Package certmsg turns Go's certificate verification errors into text a
// person can act on: which certificate, and whether it is signed by an
// unknown authority, expired, not yet valid, for another host name or not
// meant for this use. Both ends use it: link (the server's certificate)
// and server (a device's client certificate).
package certmsg

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Describe explains why cert (whose: "server certificate" or "client
// certificate") failed verification with err; hint is added to the
// unknown-authority message (e.g. "check --ca-file"). ok is false when
// err is not a certificate verification error.
func Describe(err error, whose, hint string) (msg string, ok bool) {
	var leaf *x509.Certificate
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) && len(cve.UnverifiedCertificates) > 0 {
		leaf = cve.UnverifiedCertificates[0]
	}
	var (
		ua  x509.UnknownAuthorityError
		ci  x509.CertificateInvalidError
		he  x509.HostnameError
		sys x509.SystemRootsError
	)
	switch {
	case errors.As(err, &ua):
		if leaf == nil {
			leaf = ua.Cert
		}
		msg = whose + " is signed by an unknown authority"
		if leaf != nil {
			msg += fmt.Sprintf(" (issuer %q)", leaf.Issuer.String())
		}
		if hint != "" {
			msg += " (" + hint + ")"
		}
	case errors.As(err, &he):
		names := he.Certificate.DNSNames
		for _, ip := range he.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		if len(names) == 0 && he.Certificate.Subject.CommonName != "" {
			names = []string{he.Certificate.Subject.CommonName + " (common name only: no subjectAltName)"}
		}
		msg = fmt.Sprintf("%s is for %s, not %s", whose, strings.Join(names, ", "), he.Host)
	case errors.As(err, &ci):
		if ci.Cert != nil { // the certificate at fault, maybe a CA's
			leaf = ci.Cert
		}
		msg = invalid(ci, leaf, whose)
	case errors.As(err, &sys):
		msg = whose + " cannot be verified: no system root certificates (" + hint + ")"
	default:
		return "", false
	}
	return msg, true
}

func invalid(ci x509.CertificateInvalidError, leaf *x509.Certificate, whose string) string {
	switch ci.Reason {
	case x509.Expired:
		if leaf != nil {
			now := time.Now()
			switch {
			case now.After(leaf.NotAfter):
				return fmt.Sprintf("%s expired on %s", whose, leaf.NotAfter.UTC().Format(time.RFC3339))
			case now.Before(leaf.NotBefore):
				return fmt.Sprintf("%s is not valid before %s (check this machine's clock)", whose, leaf.NotBefore.UTC().Format(time.RFC3339))
			}
		}
		return whose + " has expired or is not yet valid: " + ci.Detail
	case x509.IncompatibleUsage:
		return whose + " is not meant for this use (its extended key usage does not allow it)"
	case x509.NotAuthorizedToSign:
		return whose + " was signed by a certificate that is not a CA"
	case x509.NameConstraintsWithoutSANs, x509.CANotAuthorizedForThisName, x509.CANotAuthorizedForExtKeyUsage:
		return whose + " is outside what its CA may sign: " + ci.Error()
	}
	return whose + " is not valid: " + ci.Error()
}
