// Package fleetops is the fleet operations' side of the device
// connections (issue 28): the channel adapters' one wschannel.Fleet,
// handing each connect and each answer frame to the part of the fleet
// operations (the rollouts, the settings, the diag requests) that takes
// it.
package fleetops
