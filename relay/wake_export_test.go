package relay

// The wake-up looks' spacing (wake.go), for the tests of package relay_test.
const (
	WakeLookSpacing  = wakeDiscoverySpacing
	WakeLookPatience = wakeDiscoveryPatience
)
