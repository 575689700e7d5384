package envlabels

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLabelOfAVariable(t *testing.T) {
	assert.Equal(t, "test.test.kubevirt.io/test-test", label("TEST_TEST_KUBEVIRT_IO_TEST_TEST"))
	assert.Equal(t, "instancetype.kubevirt.io/default-preference", label("INSTANCETYPE_KUBEVIRT_IO_DEFAULT_PREFERENCE"))
	assert.Equal(t, "kubevirt.io/os", label("KUBEVIRT_IO_OS"))
}

func TestFromEnvTakesOnlyKubevirtVariables(t *testing.T) {
	assert.Equal(t, map[string]string{"instancetype.kubevirt.io/default-instancetype": "u1.medium"},
		FromEnv([]string{"PATH=/bin", "INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.medium"}))
	assert.Nil(t, FromEnv([]string{"PATH=/bin"}))
}
