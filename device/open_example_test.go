package device_test

import (
	"context"
	"fmt"
	"log"

	"termlink/boards"
	"termlink/device"
)

func ExampleOpenParts() {
	p, err := boards.Load("rpi-lcd1602-i2c")
	if err != nil {
		log.Fatal(err)
	}
	dev, err := device.OpenParts(context.Background(), p)
	if err != nil {
		// e.g. board rpi-lcd1602-i2c: open I2C bus "1": /dev/i2c-1 does not
		// exist: enable I2C with raspi-config (Interface Options > I2C), ...
		log.Fatal(err)
	}
	defer dev.Close()
	fmt.Println(dev.Bus, dev.Addr)
}
