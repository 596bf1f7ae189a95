// Package workflows holds the tests of the forge's CI workflow files (.github/workflows).
package workflows
