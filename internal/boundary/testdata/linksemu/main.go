// Command linksemu is a throwaway main that links an emulator, so that
// TestBinaryShipsNoTestEquipment can show its check fails on one.
package main

import (
	"fmt"

	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

func main() { fmt.Println(eksemu.New) }
