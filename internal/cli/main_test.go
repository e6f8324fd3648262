package cli

import (
	"testing"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }
