// Package deploy holds no code: its tests check the deployment files next
// to it (the container image, the systemd unit, the Kubernetes manifests,
// the Prometheus alert rules) and the release script, so that what
// docs/deploy.md tells an operator to use builds, parses and agrees with
// the relay's flags and endpoints.
package deploy
